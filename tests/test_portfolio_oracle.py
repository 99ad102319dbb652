"""The portfolio model agrees with an exhaustive oracle on small random portfolios (coarse grid, exact money).

The oracle is written from the problem statement alone: it tries every run and start of every occurrence, every
grouping of the rented occurrences of one offer into blocks (offers without a day/week/month price rent per job),
sizes each block to its peak card use, prices it as the cheapest mix of the offer's terms covering its span (with
at least one day, week or month unit when it carries several jobs)
(Fractions, plain loops), buys as many cards as the peak use of the buy option, and keeps the cheapest total.
"""

from __future__ import annotations

import itertools
import random
from fractions import Fraction
from functools import cache

import pytest

from optimizer.inputs.schema import Status
from optimizer.portfolio.problem import purchase_bound
from optimizer.portfolio.schedule import (
    Occurrence,
    Pool,
    Problem,
    Rental,
    Run,
    Schedule,
    Settings,
    greedy,
    lower_bound,
    solve,
)

GRID_S = 6 * 3600  # six hours per grid unit
HORIZON = 6  # grid units: a day and a half
_TERM_S = {"month": 720 * 3600, "week": 168 * 3600, "day": 24 * 3600}


def _frac(x: float) -> Fraction:
    return Fraction(x).limit_denominator(10**6)


@cache
def _cover(prices: tuple[tuple[str, float], ...], increment_s: int, seconds: int, shared: bool) -> Fraction | None:
    """Cheapest per-card bill covering ``seconds``: every count of long units, the rest in hourly increments.

    A block carrying several jobs bills at least one day, week or month unit (``shared``).
    """
    price = dict(prices)
    longs = [t for t in _TERM_S if t in price]
    best = None
    ranges = [range(-(-seconds // _TERM_S[t]) + 1) for t in longs]
    for counts in itertools.product(*ranges):
        if shared and not any(counts):
            continue
        covered = sum(n * _TERM_S[t] for n, t in zip(counts, longs, strict=True))
        amount = sum(n * _frac(price[t]) for n, t in zip(counts, longs, strict=True))
        rest = max(0, seconds - covered)
        if rest:
            if "hour" not in price:
                continue
            increments = -(-rest // increment_s)
            amount += increments * increment_s * _frac(price["hour"]) / 3600
        best = amount if best is None or amount < best else best
    return best


def _partitions(items: list[int]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [[first], *part]
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1 :]]


def _peak(spans: list[tuple[int, int, int]]) -> int:
    """Largest sum of cards over time of (start, end, cards) spans."""
    return max((sum(c for s, e, c in spans if s <= t < e) for t in range(HORIZON)), default=0)


def _rent_cost(problem: Problem, chosen: dict[int, tuple[int, int, int]], groups: list[list[int]]) -> Fraction | None:
    total = Fraction(0)
    for group in groups:
        f = problem.occurrences[group[0]].runs[chosen[group[0]][0]].where
        rental = problem.rentals[f]
        spans = [(chosen[j][1], chosen[j][1] + chosen[j][2], problem.occurrences[j].runs[chosen[j][0]].cards)
                 for j in group]  # fmt: skip
        peak = _peak(spans)
        size = min((k for k in rental.sizes if k >= peak), default=None)
        if size is None:
            return None
        span = max(e for _, e, _ in spans) - min(s for s, _, _ in spans)
        bill = _cover(tuple(sorted(rental.prices.items())), rental.increment_s, span * problem.grid_s, len(group) > 1)
        if bill is None:
            return None
        total += size * bill
    return total


def _local_cost(problem: Problem, chosen: dict[int, tuple[int, int, int]]) -> Fraction | None:
    total = Fraction(0)
    for q, pool in enumerate(problem.pools):
        spans = []
        for j, (r, start, dur) in chosen.items():
            run = problem.occurrences[j].runs[r]
            if run.kind == "pool" and run.where == q:
                spans.append((start, start + dur, run.cards))
                total += _frac(run.cost)
        peak = _peak(spans)
        if peak > pool.cards:
            return None
        if not pool.owned:
            total += peak * _frac(pool.card_cost)
    return total


def _groupings(problem: Problem, chosen: dict[int, tuple[int, int, int]]):
    by_offer: dict[int, list[int]] = {}
    for j, (r, _, _) in chosen.items():
        run = problem.occurrences[j].runs[r]
        if run.kind == "rent":
            by_offer.setdefault(run.where, []).append(j)
    per_offer = []
    for f, members in sorted(by_offer.items()):
        if problem.rentals[f].shareable:
            per_offer.append(list(_partitions(members)))
        else:
            per_offer.append([[[j] for j in members]])
    for combo in itertools.product(*per_offer):
        yield [g for groups in combo for g in groups]


def oracle(problem: Problem) -> Fraction | None:
    """Cheapest total over every run, start and grouping (None when nothing is feasible)."""
    options = []
    for occ in problem.occurrences:
        options.append([(r, s, run.duration) for r, run in enumerate(occ.runs)
                        for s in range(occ.release, occ.due - run.duration + 1)])  # fmt: skip
    best = None
    for combo in itertools.product(*options):
        chosen = dict(enumerate(combo))
        local = _local_cost(problem, chosen)
        if local is None:
            continue
        for groups in _groupings(problem, chosen):
            rent = _rent_cost(problem, chosen, groups)
            if rent is not None and (best is None or local + rent < best):
                best = local + rent
    return best


def evaluate(problem: Problem, schedule) -> Fraction | None:
    """The oracle's price of the model's schedule (its runs, starts, blocks and the rest rented alone)."""
    chosen = {j: (r, schedule.starts[j], problem.occurrences[j].runs[r].duration) for j, r in enumerate(schedule.runs)}
    for j, (_, start, dur) in chosen.items():
        occ = problem.occurrences[j]
        assert occ.release <= start and start + dur <= occ.due
    in_block = {j for b in schedule.blocks for j in b.members}
    groups = [list(b.members) for b in schedule.blocks]
    groups += [[j] for j, (r, _, _) in chosen.items()
               if problem.occurrences[j].runs[r].kind == "rent" and j not in in_block]  # fmt: skip
    local, rent = _local_cost(problem, chosen), _rent_cost(problem, chosen, groups)
    assert local is not None and rent is not None
    return local + rent


def _bill(prices: dict[str, float], increment_s: int, seconds: int) -> float:
    # the runs' solo bills come from the production billing (cost.py) so that the oracle checks it too
    from optimizer.inputs.schema import Term
    from optimizer.inputs.schema_catalog import Offer, Price
    from optimizer.models.cost import bill

    terms = {Term(t): Price.model_construct(amount=a) for t, a in prices.items()}
    offer = Offer.model_construct(id="x", hour_increment_s=increment_s, prices=terms)
    return bill(seconds / 3600, offer).per_card


def random_problem(rng: random.Random) -> Problem:
    rentals_spec = []
    for f in range(rng.randint(1, 2)):
        prices = {"hour": rng.choice([1.0, 1.5, 2.0, 3.0])}
        if rng.random() < 0.7:
            prices["day"] = rng.choice([8.0, 12.0, 20.0, 30.0])
        rentals_spec.append((f"offer-{f}", prices, rng.choice([3600, 60])))
    pools = [Pool("RTX-4090", False, rng.randint(1, 2), rng.choice([4.0, 10.0, 25.0, 60.0]))]
    if rng.random() < 0.25:
        pools.insert(0, Pool("RTX-4090", True, 1, 0.0))
    occurrences = []
    sizes: dict[int, set[int]] = {}
    for j in range(rng.randint(2, 4)):
        release = rng.randint(0, 3)
        due = rng.randint(release + 1, HORIZON)
        runs = []
        for q in range(len(pools)):
            d = rng.randint(1, 2)
            runs.append(Run("pool", q, 1, d, d * GRID_S / 3600, rng.choice([1.0, 2.0, 4.0]), 0))
        for f, (_, prices, inc) in enumerate(rentals_spec):
            for cards in sorted(rng.sample([1, 2], rng.randint(1, 2))):
                d = rng.randint(1, 3)
                cost = cards * _bill(prices, inc, d * GRID_S)
                runs.append(Run("rent", f, cards, d, d * GRID_S / 3600, cost, 0))
        runs = [r for r in runs if r.duration <= due - release] or [runs[-1]]
        due = max(due, release + runs[0].duration)
        for r in runs:
            if r.kind == "rent":
                sizes.setdefault(r.where, set()).add(r.cards)
        occurrences.append(Occurrence(j, 0, release, min(due, HORIZON), tuple(runs)))
    occurrences = [o for o in occurrences if all(o.release + r.duration <= o.due for r in o.runs)]
    rentals = tuple(Rental(name, "A100-80G", prices, inc, tuple(sorted(sizes.get(f, set()))))
                    for f, (name, prices, inc) in enumerate(rentals_spec))  # fmt: skip
    return Problem(GRID_S, HORIZON, tuple(occurrences), tuple(pools), rentals)


@pytest.mark.parametrize("seed", range(16))
def test_model_optimum_matches_the_exhaustive_oracle(seed):
    problem = random_problem(random.Random(seed))
    expected = oracle(problem)
    schedule = solve(problem)
    if expected is None:
        assert schedule.status is Status.infeasible
        return
    assert schedule.status is Status.optimal
    got = evaluate(problem, schedule)
    # the model's coefficients are rounded up to 1/10,000 of the currency: a few such units per term at most
    assert abs(float(got - expected)) <= 0.01, (float(got), float(expected))
    assert abs(schedule.objective - float(expected)) <= 0.01


@pytest.mark.parametrize("seed", range(16))
def test_the_greedy_hint_is_feasible_and_the_quick_bound_is_below_the_optimum(seed):
    problem = random_problem(random.Random(seed))
    expected = oracle(problem)
    plan = greedy(problem)
    if expected is None:
        assert plan is None
        return
    assert lower_bound(problem) <= purchase_bound(problem) <= float(expected) + 1e-9
    if plan is not None:  # every occurrence placed: the oracle prices it (and checks windows and capacity)
        runs, starts, bought = plan
        hinted = evaluate(problem, Schedule(Status.feasible, None, None, runs, starts, bought, []))
        assert hinted >= expected


@pytest.mark.parametrize("seed", [3, 10, 12])
def test_cp_sat_stopping_before_any_solution_still_answers_with_the_hint_and_a_valid_bound(seed, monkeypatch):
    import optimizer.portfolio.schedule as portfolio

    monkeypatch.setattr(portfolio, "status_of", lambda code: None)  # as if the time limit struck before a solution
    problem = random_problem(random.Random(seed))
    schedule = solve(problem, Settings(time_limit_s=1))
    expected = oracle(problem)
    assert schedule.status is Status.feasible
    assert schedule.bound <= float(expected) + 1e-9 <= schedule.objective + 1e-9
    assert evaluate(problem, schedule) == pytest.approx(schedule.objective)


@pytest.mark.parametrize("seed", range(16, 48))
def test_the_purchase_bound_never_passes_the_optimum(seed):
    problem = random_problem(random.Random(seed))
    expected = oracle(problem)
    if expected is not None:
        assert purchase_bound(problem) <= float(expected) + 1e-9


def test_the_purchase_bound_counts_the_card_a_repeated_job_needs():
    # five daily runs: 1 of electricity each on a bought card (capital 10), or a solo rental of 5 each; windows
    # do not overlap, so one card holds them all: optimum min(10 + 5 x 1, 5 x 5) = 15, while the per-run bound
    # (lower_bound) only sees 5 x 1
    day = 24
    occurrences = tuple(Occurrence(0, i, i * day, (i + 1) * day, (Run("pool", 0, 1, 16, 16.0, 1.0, 0),
                                                                   Run("rent", 0, 1, 16, 16.0, 5.0, 0)))
                        for i in range(5))  # fmt: skip
    problem = Problem(3600, 5 * day, occurrences, (Pool("RTX-4090", False, 2, 10.0),),
                      (Rental("r", "RTX-4090", {"hour": 5 / 16}, 3600, (1,)),))  # fmt: skip
    assert lower_bound(problem) == pytest.approx(5.0)
    assert purchase_bound(problem) == pytest.approx(15.0)
    schedule = solve(problem)
    assert schedule.status is Status.optimal and schedule.objective == pytest.approx(15.0)
