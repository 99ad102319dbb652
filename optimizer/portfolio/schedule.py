"""CP-SAT scheduling of many job occurrences over a calendar on owned, bought and rented cards (issue 15).

Formulation. Time counts grid units of g seconds from the horizon start (g = 1 s by default, so per-second bills
stay exact); money counts units of 1/MONEY of the portfolio currency, every coefficient rounded up.

Sets: occurrences j (a job's repeat i, window [r_j, d_j]); runs o in O_j (one way to run j, from the job's pruned
candidate space: a pool q with k_o cards, or a rental offer f with k_o cards; duration p_o grid units, rounded
up); pools q (an owned machine of C_q cards, or a buy option of up to M_q cards); shared block slots b of a
rental offer f_b with K_b cards (only offers with a day, week or month price: see "sharing" below).

Data: e_o electricity of a pool run (k_o x hours x power_w / 1000 x price per kWh); s_j the cheapest solo rental
of j, min over j's rental runs of k_o x bill_f(p_o) with bill_f the cheapest mix of the offer's terms covering
p_o (cost.py); c_q the capital of one bought card over the horizon, price x (1 - resale) x horizon_days /
(365 x life_years); P_{b,t} = K_b x price of term t (month, week, day) and P_{b,h} = K_b x hourly price of f_b;
inc_f the offer's billing increment in seconds.

Variables:
    solo[j]   in {0, 1}  j is rented alone, on its cheapest solo rental (a block of its own)
    use[o,b]  in {0, 1}  j runs as o: on pool q (b = none) or inside shared block slot b
    iv[o,b]   optional interval [x_o, x_o + p_o), present iff use[o,b], with r_j <= x_o, x_o + p_o <= d_j
    buy[q]    integer in [0, M_q]: cards bought from buy option q (owned pools: constant C_q)
    open[b]   in {0, 1}  slot b is rented; S_b <= E_b its start and end (grid units)
    n[b,t]    integer >= 0: billed units of term t in {month, week, day}; u[b] >= 0 billed hourly increments;
    h[b]      integer >= 0: the hourly part of b's bill (money units)

Constraints:
    (1) solo[j] + sum_{o,b} use[o,b] = 1                                   for every occurrence j
    (2) cumulative(iv[o,none] of pool q, demand k_o) <= C_q (owned) or buy[q] (bought)   at every time
    (3) use[o,b] => open[b], S_b <= x_o, x_o + p_o <= E_b                    for shared runs
    (4) cumulative(iv[o,b] of slot b, demand k_o) <= K_b, with k_o <= K_b
    (5) 3600 (720 n[b,month] + 168 n[b,week] + 24 n[b,day]) + inc_f u[b] >= g (E_b - S_b)   (the bill covers b)
    (6) 3600 h[b] >= P_{b,h} inc_f u[b];  not open[b] => E_b = S_b
    (7) sum_{o} use[o,b] >= 2 open[b]  (a block of one job is never cheaper than that job's solo rental s_j), and
        sum_t n[b,t] >= open[b]  (a shared block bills at least one day, week or month unit)
    (8) open[b] >= open[b+1] and open[b+1] => S_b <= S_{b+1}  for slots of one (f, K)   (symmetry)
    (9) redundant, for the relaxation: bill_b >= K_b x cover_f(p_o) use[o,b] for each member o (the block spans
        at least o), and bill_b >= rate_f sum_o k_o p_o use[o,b] (K_b x span >= the members' card-time by (4);
        rate_f the offer's cheapest price per card-hour over its terms), and bill_b >= K_b rate_f (E_b - S_b)
    (10) redundant, for bought pools: buy[q] >= k_o use[o], and sum_o k_o p_o use[o] <= H buy[q] (H the horizon)
Objective: min sum_j s_j solo[j] + sum_o e_o use[o,none] + sum_q c_q buy[q]
               + sum_b (sum_t P_{b,t} n[b,t] + h[b])

Sharing. Jobs running in one block pay for the block's span, gaps included, so sharing pays when a day, week or
month unit is cheaper than the hours it replaces; those offers get slots, and a shared block bills at least one
such unit. Hours billed per increment are linear in cards and time, so sharing them saves nothing but the
rounding of one increment per job (an hour on offers billed by the hour): that rounding is not shared (a stated
restriction, which keeps the model small and provable; the oracle test states the same rule). Each (f, K) where
sharing can pay at all (sharing_can_pay: an exact test comparing the cheapest possible block with the solo
rentals it could replace) gets min(floor(n / 2), max_shared_blocks) slots, n the occurrences that can run on f
with at most K cards: exact when the cap does not bind (every shared block carries two jobs or more, by (7)).

Runs are pruned before the model: per (pool or offer, cards) the fastest configuration (space.prune: it is also the
cheapest), and a card count is dropped when fewer cards on the same offer or pool run at least as fast. Solo
rentals never interact with anything else, so only the cheapest one per occurrence enters the model.

Bounds. (11) objective >= purchase_bound(): for each vector of cards bought, the capital plus each occurrence's
cheapest way to run, less the most a fractional knapsack of the pools' summed card-time can save (valid, since
every schedule buying those cards costs at least that); the bound reported is the larger of it and CP-SAT's. It
closes the gap of a repeated job on a bought card (the model's relaxation spreads the card's capital thinly).

Status: OPTIMAL -> optimal; FEASIBLE (time limit) -> feasible with the proven lower bound; INFEASIBLE ->
infeasible; UNKNOWN (stopped before a solution), or the time limit ending while the model is built: the greedy
hint as feasible with purchase_bound() as its bound, else SolverLimitError. The limit counts the model's build.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from optimizer.inputs.errors import SolverLimitError
from optimizer.inputs.schema import TERM_HOURS, Status, Term
from optimizer.portfolio.problem import (
    LONG_TERMS,
    MONEY,
    Block,
    Occurrence,
    Pool,
    Problem,
    Rental,
    Run,
    Schedule,
    Settings,
    cover_price,
    greedy,
    lower_bound,
    plan_cost,
    purchase_bound,
    sharing_can_pay,
    solo_run,
    up,
)
from optimizer.solve.solver import status_of

__all__ = ["Block", "Occurrence", "Pool", "Problem", "Rental", "Run", "Schedule", "Settings", "greedy", "lower_bound",
           "solve"]  # fmt: skip


class _OutOfTime(Exception):
    """The time limit ended while the model was being built."""


@dataclass
class _Slot:
    rental: int
    cards: int
    open: cp_model.IntVar
    start: cp_model.IntVar
    end: cp_model.IntVar
    units: dict[str, cp_model.IntVar]
    cost: list[tuple[int, cp_model.IntVar]] = field(default_factory=list)
    members: list[tuple[int, int, cp_model.IntVar, cp_model.IntervalVar]] = field(default_factory=list)


class _Model:
    """The CP-SAT model of the module docstring, built from a Problem."""

    def __init__(self, problem: Problem, settings: Settings, deadline: float = math.inf) -> None:
        self.p = problem
        self.deadline = deadline  # time.monotonic() past which building stops (_OutOfTime)
        self.m = cp_model.CpModel()
        self.cost_terms: list[tuple[int, cp_model.IntVar]] = []
        self.choice: dict[int, list[tuple[int, int | None, cp_model.IntVar]]] = {}  # j -> (run, slot, use)
        self.starts: dict[tuple[int, int, int | None], cp_model.IntVar] = {}
        self.solo: dict[int, cp_model.IntVar] = {}
        self.buy: list[cp_model.IntVar | int] = []
        self.slots: list[_Slot] = []
        self._pools()
        self._slots(settings.max_shared_blocks)
        self._occurrences()
        self._capacity()

    def _pools(self) -> None:
        # buy[q]: cards bought from buy option q (owned pools are constants)
        for q, pool in enumerate(self.p.pools):
            if pool.owned:
                self.buy.append(pool.cards)
                continue
            var = self.m.new_int_var(0, pool.cards, f"buy_{q}")
            self.buy.append(var)
            self.cost_terms.append((up(pool.card_cost), var))

    def _slots(self, cap: int) -> None:
        # open[b], S_b, E_b, n[b,t], u[b], h[b] for each shared block slot b of a shareable offer and card count
        horizon = self.p.horizon
        for f, rental in enumerate(self.p.rentals):
            if not rental.shareable:
                continue
            for size in rental.sizes:
                eligible = [j for j, occ in enumerate(self.p.occurrences)
                            if any(r.kind == "rent" and r.where == f and r.cards <= size
                                   for r in occ.runs)]  # fmt: skip
                if not sharing_can_pay(self.p, f, size, eligible):
                    continue
                previous: _Slot | None = None
                for s in range(min(len(eligible) // 2, cap)):
                    name = f"{f}_{size}_{s}"
                    slot = _Slot(f, size, self.m.new_bool_var(f"open_{name}"),
                                 self.m.new_int_var(0, horizon, f"S_{name}"),
                                 self.m.new_int_var(0, horizon, f"E_{name}"), {})  # fmt: skip
                    self._bill(slot, rental, name)
                    # (8) symmetry between slots of one offer and card count
                    if previous is not None:
                        self.m.add_implication(slot.open, previous.open)
                        self.m.add(previous.start <= slot.start).only_enforce_if(slot.open)
                    self.slots.append(slot)
                    previous = slot

    def _bill(self, slot: _Slot, rental: Rental, name: str) -> None:
        g = self.p.grid_s
        cover = []
        span_s = g * self.p.horizon
        for t in LONG_TERMS:
            if t.value in rental.prices:
                length = TERM_HOURS[t] * 3600
                var = self.m.new_int_var(0, -(-span_s // length), f"n_{t.value}_{name}")
                slot.units[t.value] = var
                cover.append(length * var)
                slot.cost.append((up(slot.cards * rental.prices[t.value]), var))
        if Term.hour.value in rental.prices:
            inc = rental.increment_s
            most = -(-span_s // inc)
            u = self.m.new_int_var(0, most, f"u_{name}")
            slot.units["increments"] = u
            cover.append(inc * u)
            per_hour = int(round(slot.cards * rental.prices[Term.hour.value] * MONEY))
            h = self.m.new_int_var(0, -(-per_hour * inc * most // 3600), f"h_{name}")
            # (6) hourly part of the bill, rounded up to a money unit
            self.m.add(3600 * h >= per_hour * inc * u)
            slot.cost.append((1, h))
        self.cost_terms.extend(slot.cost)
        # (5) the billed units cover the block's span; (6) a closed slot spans nothing; (7) an open one bills a
        # day, week or month unit
        self.m.add(sum(cover) >= g * (slot.end - slot.start))
        self.m.add(sum(v for t, v in slot.units.items() if t != "increments") >= slot.open)
        self.m.add(slot.end >= slot.start)
        self.m.add(slot.end == slot.start).only_enforce_if(~slot.open)

    def _interval(self, j: int, o: int, b: int | None, run: Run, occ: Occurrence) -> cp_model.IntervalVar:
        tag = f"{j}_{o}_{'p' if b is None else b}"
        use = self.m.new_bool_var(f"use_{tag}")
        start = self.m.new_int_var(occ.release, occ.due - run.duration, f"x_{tag}")
        self.starts[(j, o, b)] = start
        self.choice[j].append((o, b, use))
        return self.m.new_optional_fixed_size_interval_var(start, run.duration, use, f"iv_{tag}")

    def _occurrences(self) -> None:
        # solo[j], use[o,b], iv[o,b]; (1) each occurrence runs exactly once; (3) shared runs inside their slot
        self.pool_members: dict[int, list[tuple[cp_model.IntervalVar, int, cp_model.IntVar, int]]] = {}
        for j, occ in enumerate(self.p.occurrences):
            if time.monotonic() > self.deadline:
                raise _OutOfTime
            self.choice[j] = []
            solo = solo_run(occ)
            if solo is not None:
                self.solo[j] = self.m.new_bool_var(f"solo_{j}")
                self.cost_terms.append((up(occ.runs[solo].cost), self.solo[j]))
            for o, run in enumerate(occ.runs):
                if run.kind == "pool":
                    iv = self._interval(j, o, None, run, occ)
                    use = self.choice[j][-1][2]
                    self.pool_members.setdefault(run.where, []).append((iv, run.cards, use, run.duration))
                    self.cost_terms.append((up(run.cost), self.choice[j][-1][2]))
                    continue
                for b, slot in enumerate(self.slots):
                    if slot.rental != run.where or slot.cards < run.cards:
                        continue
                    iv = self._interval(j, o, b, run, occ)
                    use, start = self.choice[j][-1][2], self.starts[(j, o, b)]
                    self.m.add_implication(use, slot.open)
                    self.m.add(slot.start <= start).only_enforce_if(use)
                    self.m.add(slot.end >= start + run.duration).only_enforce_if(use)
                    slot.members.append((j, o, use, iv))
            uses = [u for _, _, u in self.choice[j]] + ([self.solo[j]] if j in self.solo else [])
            self.m.add_exactly_one(uses)

    def _capacity(self) -> None:
        # (2) pool capacity over time, with (10) its redundant linear forms for the relaxation: a run needs its
        # cards (buy[q] >= k_o use[o]) and all runs fit in the pool's card-time (sum k_o p_o use[o] <= buy[q] H);
        # (4) slot capacity; (7) a shared block carries two jobs or more
        for q, members in sorted(self.pool_members.items()):
            self.m.add_cumulative([iv for iv, *_ in members], [k for _, k, *_ in members], self.buy[q])
            if not self.p.pools[q].owned:
                for _, k, use, _ in members:
                    self.m.add(self.buy[q] >= k * use)
                self.m.add(sum(k * p * use for _, k, use, p in members) <= self.p.horizon * self.buy[q])
        for slot in self.slots:
            self.m.add_cumulative(
                [iv for *_, iv in slot.members],
                [self.p.occurrences[j].runs[o].cards for j, o, _, _ in slot.members],
                slot.cards,
            )
            self.m.add(sum(use for _, _, use, _ in slot.members) >= 2 * slot.open)
            self._cuts(slot)

    def _cuts(self, slot: _Slot) -> None:
        # (9) redundant bounds on a block's bill, for the relaxation: at least each member's own cover on K cards,
        # and at least the cheapest per-card-hour rate times the members' card-hours (cumulative (4))
        rental = self.p.rentals[slot.rental]
        bill = sum(c * v for c, v in slot.cost)
        rate = min(price / TERM_HOURS[Term(t)] for t, price in rental.prices.items())
        hours = self.p.grid_s / 3600.0
        work = []
        for j, o, use, _ in slot.members:
            run = self.p.occurrences[j].runs[o]
            own = slot.cards * cover_price(rental, run.duration * self.p.grid_s)
            self.m.add(bill >= int(own * MONEY) * use)
            work.append(int(rate * run.cards * run.duration * hours * MONEY) * use)
        self.m.add(bill >= sum(work))
        self.m.add(3600 * bill >= int(slot.cards * rate * self.p.grid_s * MONEY) * (slot.end - slot.start))

    def hint(self, plan: tuple[list[int | None], list[int], list[int]] | None) -> None:
        """A complete hint from greedy(): each occurrence rented alone or on a pool at a start, cards bought.

        None (some occurrence has no rental and the greedy placed nothing): CP-SAT searches from scratch.
        """
        if plan is None:
            return
        runs, starts, bought = plan
        for j, choices in self.choice.items():
            if j in self.solo:
                self.m.add_hint(
                    self.solo[j],
                    int(
                        runs[j] == solo_run(self.p.occurrences[j])
                        and self.p.occurrences[j].runs[runs[j]].kind == "rent"
                    ),
                )
            for o, b, use in choices:
                on = b is None and o == runs[j] and self.p.occurrences[j].runs[o].kind == "pool"
                self.m.add_hint(use, int(on))
                self.m.add_hint(self.starts[(j, o, b)], starts[j] if on else self.p.occurrences[j].release)
        for q, var in enumerate(self.buy):
            if not isinstance(var, int):
                self.m.add_hint(var, bought[q])
        for slot in self.slots:
            owned = (slot.open, slot.start, slot.end, *slot.units.values(), *(v for _, v in slot.cost))
            zero = {v.index: v for v in owned}  # n[b,t] appear in units and in cost
            for var in zero.values():
                self.m.add_hint(var, 0)


DEFAULT_SETTINGS = Settings()


def solve(problem: Problem, settings: Settings = DEFAULT_SETTINGS) -> Schedule:
    """Cheapest schedule of the problem (module formulation), proven optimal unless the time limit stops it."""
    missing = [j for j, occ in enumerate(problem.occurrences) if not occ.runs]
    if missing:
        return Schedule(Status.infeasible)
    started = time.monotonic()
    plan = greedy(problem)
    floor = purchase_bound(problem)
    try:  # building a large model may take longer than the limit: then the greedy schedule is the answer
        model = _Model(problem, settings, started + settings.time_limit_s)
    except _OutOfTime:
        model = None
    if model is None and plan is not None:
        return _from_plan(problem, plan, floor)
    if model is None:
        raise SolverLimitError(f"the {settings.time_limit_s:g} s time limit ended while the schedule model was "
                               "being built, and no simple schedule exists; raise --time-limit")  # fmt: skip
    model.hint(plan)
    objective = sum(c * v for c, v in model.cost_terms)
    model.m.add(objective >= math.floor(floor * MONEY * (1 - 1e-9)) - 1)  # (11) valid: coefficients round up
    model.m.minimize(objective)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(settings.time_limit_s - (time.monotonic() - started), 1e-3)
    solver.parameters.num_workers = settings.workers
    solver.parameters.random_seed = settings.seed
    status = status_of(solver.solve(model.m))
    if status is None and plan is not None:
        return _from_plan(problem, plan, floor)
    if status is None:
        raise SolverLimitError(f"CP-SAT found no schedule within the {settings.time_limit_s:g} s time limit; "
                               "raise --time-limit")  # fmt: skip
    if status is Status.infeasible:
        return Schedule(Status.infeasible)
    return _read(model, solver, status, floor)


def _from_plan(problem: Problem, plan: tuple[list[int | None], list[int], list[int]], floor: float) -> Schedule:
    """The greedy hint itself, when CP-SAT stops before reporting a solution (feasible, bound from purchase_bound)."""
    runs, starts, bought = plan
    total = plan_cost(problem, runs, bought)
    return Schedule(Status.feasible, total, min(floor, total), list(runs), list(starts), list(bought), [])


def _read(model: _Model, solver: cp_model.CpSolver, status: Status, floor: float) -> Schedule:
    value = solver.objective_value / MONEY
    out = Schedule(status, value, min(max(solver.best_objective_bound / MONEY, floor), value))
    members: dict[int, list[int]] = {}
    for j, occ in enumerate(model.p.occurrences):
        if j in model.solo and solver.boolean_value(model.solo[j]):
            out.runs.append(solo_run(occ))
            out.starts.append(occ.release)
            continue
        o, b = next((o, b) for o, b, use in model.choice[j] if solver.boolean_value(use))
        out.runs.append(o)
        out.starts.append(int(solver.value(model.starts[(j, o, b)])))
        if b is not None:
            members.setdefault(b, []).append(j)
    pairs = zip(model.p.pools, model.buy, strict=True)
    out.bought = [0 if pool.owned else int(solver.value(var)) for pool, var in pairs]
    for b, slot in enumerate(model.slots):
        if b not in members:
            continue
        units = {t: int(solver.value(v)) for t, v in slot.units.items()}
        out.blocks.append(Block(slot.rental, slot.cards, int(solver.value(slot.start)), int(solver.value(slot.end)),
                                {t: n for t, n in units.items() if n}, tuple(members[b])))  # fmt: skip
    return out
