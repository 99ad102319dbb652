"""Rental billing: whole billing units per term, the cheapest mix of terms, currency conversion.

A job of H hours on an offer is billed per card as the cheapest combination of the offer's terms whose total
length covers H:

    bill(H) = min over k in {0, 24, 48, ...} of  L(k) + p_hour x ceil_inc(max(0, H - k))

where L(k) is the cheapest mix of days, weeks and months covering at least k hours (an unbounded covering
knapsack over day units, solved by dynamic programming), and ceil_inc rounds the remaining hours up to the offer's
billing increment (a started hour is a paid hour unless the offer bills per minute or per second). Day, week and
month lengths are 24, 168 and 720 hours (schema.TERM_HOURS). The minimum is exact: every mix is some long-term
cover plus hourly time for what it leaves uncovered. The result is non-decreasing in H, which the candidate
pruning in space.py relies on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from optimizer.inputs.errors import InputError
from optimizer.inputs.schema import TERM_HOURS, Term
from optimizer.inputs.schema_catalog import Offer

_LONG = (Term.month, Term.week, Term.day)
_INCREMENT_UNIT = {3600: "hour", 60: "minute", 1: "second"}


@dataclass(frozen=True)
class Bill:
    """Cost per card and the billed units of each term, e.g. {"month": 1, "hour": 30}."""

    per_card: float
    units: dict[str, int]

    @property
    def term(self) -> str:
        """The terms used, longest first, joined by '+'; 'none' for an empty bill."""
        return "+".join(k for k in ("month", "week", "day", "hour", "minute", "second") if self.units.get(k)) or "none"


def _long_cover_table(offer: Offer, days: int, terms: frozenset[Term]) -> tuple[np.ndarray, np.ndarray]:
    """cost[j], choice[j]: cheapest day/week/month mix covering >= j days, and the term bought last (-1 = none).

    Entry j depends only on the entries below it, so the table of a price list is computed once per process and
    extended when a longer job needs more days; every offer with the same long-term prices shares it.
    """
    options = tuple(
        (TERM_HOURS[t] // 24, offer.prices[t].amount, i)
        for i, t in enumerate(_LONG)
        if t in terms and t in offer.prices
    )
    cost, choice = _COVER_TABLES.get(options, (None, None))
    if cost is None or cost.size < days + 1:
        cost = np.full(days + 1, np.inf)
        choice = np.full(days + 1, -1, dtype=np.int64)
        cost[0] = 0.0
        for j in range(1, days + 1):
            for length, price, i in options:
                c = price + cost[max(0, j - length)]
                if c < cost[j] - 1e-12:
                    cost[j], choice[j] = c, i
        cost.flags.writeable = choice.flags.writeable = False  # shared: read only
        if len(_COVER_TABLES) >= _MAX_COVER_TABLES:
            _COVER_TABLES.clear()
        _COVER_TABLES[options] = (cost, choice)
    return cost[: days + 1], choice[: days + 1]


_COVER_TABLES: dict[tuple[tuple[int, float, int], ...], tuple[np.ndarray, np.ndarray]] = {}
_MAX_COVER_TABLES = 512


def _hourly_units(hours: np.ndarray, increment_s: int) -> np.ndarray:
    """Billing increments needed to cover ``hours`` (integer counts, rounding up, tolerant to float noise)."""
    return np.ceil(np.maximum(hours, 0.0) * 3600.0 / increment_s - 1e-9)


def bills(hours: np.ndarray, offer: Offer, terms: frozenset[Term] | None = None) -> list[Bill]:
    """Cheapest bill per card for each duration in ``hours`` (see the module formula).

    ``hours`` has shape (n,); ``terms`` restricts the terms that may be used (a scenario pinning ``term``), None
    allows every term the offer prices. A term the offer does not price, when it is the only one allowed, gives an
    infinite bill (the caller drops that candidate).
    """
    allowed = frozenset(terms) if terms else frozenset(Term)
    hours = np.asarray(hours, dtype=np.float64)
    max_days = int(math.ceil(float(hours.max(initial=0.0)) / 24.0)) + 1
    cover, choice = _long_cover_table(offer, max_days, allowed)
    k_hours = np.arange(max_days + 1) * 24.0  # (K,)
    hourly_ok = Term.hour in allowed and Term.hour in offer.prices
    inc = offer.hour_increment_s
    rest = np.maximum(hours[:, None] - k_hours[None, :], 0.0)  # (n, K)
    n_inc = _hourly_units(rest, inc)
    if hourly_ok:
        hourly = n_inc * offer.prices[Term.hour].amount * inc / 3600.0
    else:
        hourly = np.where(n_inc > 0, np.inf, 0.0)
    total = cover[None, :] + hourly
    best = np.argmin(total, axis=1)  # first (fewest long days) among equal costs: deterministic
    out: list[Bill] = []
    for row, k in enumerate(best):
        amount = float(total[row, k])
        if not np.isfinite(amount):
            out.append(Bill(per_card=math.inf, units={}))
            continue
        units: dict[str, int] = {}
        j = int(k)
        while j > 0 and choice[j] >= 0:
            term = _LONG[int(choice[j])]
            units[term.value] = units.get(term.value, 0) + 1
            j = max(0, j - TERM_HOURS[term] // 24)
        if n_inc[row, k] > 0:
            units[_INCREMENT_UNIT.get(inc, "second")] = int(n_inc[row, k] * (inc if inc not in _INCREMENT_UNIT else 1))
        out.append(Bill(per_card=amount, units=units))
    return out


def hourly_only(offer: Offer, terms: frozenset[Term] | None = None) -> bool:
    """Whether the offer's bill is hourly time alone: it prices the hour only, and the terms allow it."""
    return set(offer.prices) == {Term.hour} and (not terms or Term.hour in terms)


def hourly_bills(hours: np.ndarray, price: np.ndarray, increment_s: np.ndarray) -> list[Bill]:
    """:func:`bills` of rows on offers that price the hour only (:func:`hourly_only`), many offers at once.

    Each row is billed p_hour x ceil_inc(max(0, H)) with its own offer's price and increment: the module formula
    with no long-term cover (every k > 0 costs an infinite cover), computed with the same operations in the same
    order, so each bill is the one :func:`bills` gives the row on its own offer.
    """
    hours = np.asarray(hours, dtype=np.float64)
    n_inc = _hourly_units(np.maximum(hours - 0.0, 0.0), increment_s)
    amount = n_inc * price * increment_s / 3600.0
    out: list[Bill] = []
    for count, total, inc in zip(n_inc.tolist(), amount.tolist(), increment_s.tolist(), strict=True):
        units = {_INCREMENT_UNIT.get(inc, "second"): int(count * (inc if inc not in _INCREMENT_UNIT else 1))} \
            if count > 0 else {}  # fmt: skip
        out.append(Bill(per_card=total + 0.0, units=units))
    return out


def bill(hours: float, offer: Offer, terms: frozenset[Term] | None = None) -> Bill:
    """Cheapest bill per card for one duration."""
    return bills(np.array([hours]), offer, terms)[0]


def convert(amount: float, rate: float) -> float:
    """An amount in the offer currency times the exchange rate into the target currency."""
    return amount * rate


def fx_rate(catalog_rates: object, base: str, quote: str, source: str = "scenario", offer: str | None = None) -> float:
    """Rate base->quote from a catalog; a missing rate is a one-line error naming both currencies (and the offer)."""
    found = catalog_rates.rate(base, quote)  # type: ignore[attr-defined]
    if found is None:
        priced = f" (offer {offer} is priced in {base})" if offer else ""
        raise InputError(
            source,
            "budget.currency",
            f"no exchange rate {base}->{quote} in catalogs/fx.yaml{priced}; add one or use a {base} budget",
        )
    return float(found.rate)
