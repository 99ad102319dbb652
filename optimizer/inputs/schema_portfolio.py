"""Pydantic model of a portfolio file: a team's jobs over a horizon, the cards it owns, the cards it may buy.

A portfolio (docs/portfolio.md) names scenario files, each run once or repeated, inside release and due days
counted from the horizon start; the owned cards cost only electricity; a ``buy`` option may be bought at day 0 and
costs its capital share over the horizon; every other card is rented from the ``catalog`` offers.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from optimizer.inputs.schema import Currency, Float, Int, PositiveFloat, Strict

MAX_OCCURRENCES = 2000  # every repeated job counts; a daily job over five years is 1,826


class Repeat(Strict):
    """The job runs ``count`` times, each window ``every_days`` after the previous one."""

    every_days: PositiveFloat = Field(le=3660, description="days between the starts of two windows")
    count: Int = Field(ge=1, le=MAX_OCCURRENCES, description="occurrences, the first one included")


class PortfolioJob(Strict):
    """One job of the portfolio: a scenario file and its window(s) in days from the horizon start."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="unique job name")
    scenario: str = Field(min_length=1, description="scenario file (relative to the portfolio file or the cwd)")
    release_day: Float = Field(ge=0, le=3660, allow_inf_nan=False, description="earliest start, days")
    due_day: PositiveFloat = Field(le=3660, description="latest end, days")
    repeat: Repeat | None = None

    @model_validator(mode="after")
    def _window(self) -> PortfolioJob:
        if self.due_day <= self.release_day:
            raise ValueError(f"due_day ({self.due_day:g}) must be after release_day ({self.release_day:g})")
        return self

    @property
    def occurrences(self) -> int:
        """How many times the job runs."""
        return self.repeat.count if self.repeat else 1

    def window_days(self, occurrence: int) -> tuple[float, float]:
        """Release and due day of one occurrence (counted from 0)."""
        shift = occurrence * self.repeat.every_days if self.repeat else 0.0
        return self.release_day + shift, self.due_day + shift


class Owned(Strict):
    """Cards the team has now, in one machine: only their electricity is paid."""

    gpu: str = Field(min_length=1, description="a GPU id or alias of catalogs/gpus.yaml")
    cards: Int = Field(ge=1, le=1024)
    power_w: PositiveFloat = Field(le=10_000, description="power per card while a job runs, watts")
    host_ram_gib: PositiveFloat | None = Field(
        None, le=1e6, description="RAM of the machine, GiB; unset: calibration hosts.host_ram_default per card"
    )


class BuyOption(Strict):
    """Cards the solver may buy at day 0 (one machine of up to ``max_cards``), priced per card."""

    gpu: str = Field(min_length=1, description="a GPU id or alias of catalogs/gpus.yaml")
    price: PositiveFloat = Field(le=1e9, description="purchase price per card, in the portfolio currency")
    life_years: PositiveFloat = Field(le=50, description="years over which the card is written off")
    resale_fraction: Float = Field(ge=0, lt=1, allow_inf_nan=False, description="resale value / price at end of life")
    power_w: PositiveFloat = Field(le=10_000, description="power per card while a job runs, watts")
    max_cards: Int = Field(ge=1, le=1024)
    host_ram_gib: PositiveFloat | None = Field(
        None, le=1e6, description="RAM of the machine, GiB; unset: calibration hosts.host_ram_default per card"
    )


class Portfolio(Strict):
    """Top level of a portfolio file."""

    name: str | None = None
    currency: Currency
    horizon_days: Int = Field(ge=1, le=3660, description="planning horizon, days from day 0")
    jobs: list[PortfolioJob] = Field(min_length=1)
    owned: list[Owned] = []
    buy: list[BuyOption] = []
    electricity_per_kwh: Float | None = Field(None, ge=0, le=1e4, allow_inf_nan=False,
                                              description="price of a kWh in the portfolio currency")  # fmt: skip
    catalog: str | list[str] | None = Field(None, description="rental offers: built-in name(s) or path(s)")

    @model_validator(mode="after")
    def _consistent(self) -> Portfolio:
        names = [j.name for j in self.jobs]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise ValueError(f"jobs: job name '{dup}' is used twice; names must be unique")
        if (self.owned or self.buy) and self.electricity_per_kwh is None:
            raise ValueError("electricity_per_kwh is required when owned or buy cards are listed")
        total = sum(j.occurrences for j in self.jobs)
        if total > MAX_OCCURRENCES:
            raise ValueError(f"jobs: {total:,} occurrences in all, more than the {MAX_OCCURRENCES:,} planned at once")
        for i, job in enumerate(self.jobs):
            last = job.occurrences - 1
            due = job.window_days(last)[1]
            if due > self.horizon_days + 1e-9:
                raise ValueError(f"jobs[{i}]: occurrence {last} of '{job.name}' is due on day {due:g}, after "
                                 f"horizon_days ({self.horizon_days}); shorten repeat or extend it")  # fmt: skip
        return self
