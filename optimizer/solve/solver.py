"""CP-SAT model over the pruned candidates: pick one plan, honour the user's limits, explain infeasibility.

Formulation (the README's "How it works", in full). Sets: candidates i in C (space.Space.cand, one per offer and
card count). Data per candidate: cost c_i (cents of the report currency, rounded up), time t_i (seconds of wall
clock, rounded up), gpu g_i, provider v_i, cards n_i, nodes m_i and the other decision values.

Variables:
    pick[i]  in {0, 1}   1 when candidate i is the plan
    x_k      integer     decision variable k (gpu, offer, cards, nodes, tp, dp, zero_stage, micro_batch,
                         grad_accum, offload, checkpointing, precision, capacity, cost_cents, time_s,
                         deadline_time_s), channelled as
                         x_k = sum_i value_k(i) pick[i]
    a_j      in {0, 1}   assumption literal enabling user constraint j (used to explain infeasibility)

Constraints:
    (1) sum_i pick[i] = 1
    (2) x_k = sum_i value_k(i) pick[i]                          for each x_k a limit or an objective reads
    (3) a_gpus      => sum over i with g_i not allowed of pick[i] = 0
    (4) a_providers => sum over i with v_i not allowed of pick[i] = 0
    (5) a_max_cards => x_cards <= max_cards
    (6) a_max_nodes => x_nodes <= max_nodes
    (7) a_budget    => x_cost_cents <= budget_cents
    (8) a_deadline  => x_deadline_time_s <= deadline_s
where time_s is the expected wall clock and deadline_time_s equals it on demand, and on spot capacity is the time
at the pessimistic end of the offer's interruption band (hosts.spot_time): a spot plan is chosen only when the
deadline holds even with frequent interruptions; its cost is the expected bill (restarts and lost work included).
Objective (lexicographic, one stage per level, each stage fixing the previous optimum):
    cost:  min x_cost_cents, then min x_time_s, then min rank
    time:  min x_time_s, then min x_cost_cents, then min rank
(a tie-break level is skipped when the candidate table shows a single admitted candidate tied at the levels above:
CP-SAT would return it),
where rank orders candidates by simplicity, then name: (nodes, cards, zero_stage, offload, checkpointing, tp,
gpu id, offer id, capacity), a deterministic tie-break that prefers the simpler of plans equal in cost and time.

The nonlinear models never enter CP-SAT: they were evaluated in space.py; CP-SAT sees linear sums of booleans.

Status (status_of): OPTIMAL -> optimal; FEASIBLE, CP-SAT stopped by the time limit with a plan -> feasible, with
the proven lower bound of the first objective; UNKNOWN, stopped before any plan -> the candidate table's own
lexicographic best (incumbent(), also CP-SAT's solution hint) as feasible, or infeasible when no candidate meets
every limit, so a command under any --time-limit answers with a plan when one exists; INFEASIBLE -> infeasible,
with the assumption literals of a sufficient core (explain.py shrinks it). The time limit bounds the whole
lexicographic solve, model building included: each level gets what the previous ones left.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from optimizer.inputs.errors import InputError
from optimizer.inputs.schema import Objective, Status
from optimizer.solve.limits import REGISTRY, Limits, cents, column, limits_from, seconds
from optimizer.solve.space import Space

# Limits, cents, seconds and limits_from live in optimizer.solve.limits (the registry of user limits); re-exported here
__all__ = ["Limits", "Outcome", "SolverSettings", "cents", "limits_from", "seconds", "solve", "status_of"]


@dataclass(frozen=True)
class SolverSettings:
    """CP-SAT parameters: one place for the time limit, workers and seed (deterministic search)."""

    time_limit_s: float = 10.0
    workers: int = 1
    seed: int = 0
    model_path: str | None = None  # write the model here (debugging)

    def __post_init__(self) -> None:
        """A time limit CP-SAT would reject (NaN, infinite, not positive) is a user error, not a crash."""
        if not (math.isfinite(self.time_limit_s) and self.time_limit_s > 0):
            raise InputError("command line", "--time-limit", f"must be a finite number of seconds > 0, "
                             f"got {self.time_limit_s}")  # fmt: skip


@dataclass
class Outcome:
    """Solver result: status, the chosen candidate index, the proven bound and what binds when infeasible."""

    status: Status
    index: int | None
    objective: int | None = None
    bound: float | None = None
    binding: list[str] = field(default_factory=list)


class _Columns:
    """Integer data of the candidates, the rows of the channelling constraints."""

    def __init__(self, space: Space) -> None:
        c = space.cand
        self.gpu_names = sorted(set(g.id for g in space.gpus))
        code = {g: k for k, g in enumerate(self.gpu_names)}
        self.gpu = np.array([code[g.id] for g in space.gpus], dtype=np.int64)[c.offer_idx]
        offer_code = np.unique(np.array([o.id for o in space.offers], dtype=object), return_inverse=True)[1]
        self.names = {s.column: column(space, s.column) for s in REGISTRY if s.kind == "names"}
        self.values: dict[str, np.ndarray] = {
            "gpu": self.gpu,
            "offer": c.offer_idx.astype(np.int64),
            "cards": c.cards.astype(np.int64),
            "nodes": c.nodes.astype(np.int64),
            "tp": c.cfg.tp,
            "pp": c.cfg.pp,
            "dp": c.cfg.dp,
            "zero_stage": c.cfg.zero_stage,
            "offload": c.cfg.offload,
            "micro_batch": c.cfg.micro_batch,
            "grad_accum": c.cfg.grad_accum,
            "checkpointing": c.cfg.checkpointing,
            "precision": c.cfg.precision,
            "cost_cents": column(space, "cost_cents"),
            "time_s": seconds(c.time["hours"]),
            "capacity": c.capacity.astype(np.int64),
            "deadline_time_s": column(space, "deadline_time_s"),
        }
        for spec in REGISTRY:  # a limit's own column (the budget's bill at the slow end under risk_limits)
            if spec.kind == "at_most" and spec.column not in self.values:
                self.values[spec.column] = column(space, spec.column)
        # rank orders by (nodes, cards, zero_stage, offload, checkpointing, tp, gpu id, offer id, capacity)
        order = np.lexsort((c.capacity, offer_code.reshape(-1)[c.offer_idx], self.gpu, c.cfg.tp, c.cfg.checkpointing,
                            c.cfg.offload, c.cfg.zero_stage, c.cards, c.nodes))  # fmt: skip
        self.rank = np.empty(len(c), dtype=np.int64)
        self.rank[order] = np.arange(len(c))


def columns(space: Space) -> _Columns:
    """The solver's columns of ``space``, computed once per candidate table (every solve of a scenario reuses them).

    The cache lives on the space and is keyed by the identity of the arrays it reads, so a space whose candidates
    or bills are replaced gets fresh columns.
    """
    key = (space.cand, space.cost_total, space.budget_total)
    cached = space.solver_cache.get("columns")
    if cached is not None and all(a is b for a, b in zip(cached[0], key, strict=True)):
        return cached[1]
    cols = _Columns(space)
    space.solver_cache["columns"] = (key, cols)
    return cols


class _Channels(dict):  # type: ignore[type-arg]
    """The decision variables x_k of (2), each channelled when first used (``x["cost_cents"]``).

    Only the columns a limit or an objective reads enter the model (five or six of the seventeen), which keeps
    the model CP-SAT presolves small; the plan itself is read from the picks.
    """

    def __init__(self, model: cp_model.CpModel, cols: _Columns, idx: np.ndarray, picks: list) -> None:
        super().__init__()
        self.model, self.cols, self.idx, self.picks = model, cols, idx, picks

    def __missing__(self, name: str) -> cp_model.IntVar:
        sub = self.cols.values[name][self.idx]
        lo, hi = (int(sub.min()), int(sub.max())) if sub.size else (0, 0)
        var = self.model.new_int_var(lo, hi, f"x_{name}")
        self.model.add(var == cp_model.LinearExpr.weighted_sum(self.picks, sub.tolist()))
        self[name] = var
        return var


def admitted(cols: _Columns, subset: np.ndarray, limits: Limits) -> np.ndarray:
    """The candidates of ``subset`` that meet every limit (the constraints (3)-(8) read off the table)."""
    ok = subset.copy()
    for spec in limits.specs():  # the registry's limits, as _build states them
        bound = getattr(limits, spec.key)
        if spec.kind == "names":
            names = cols.names[spec.column]
            ok &= np.fromiter((a in bound for a in names), dtype=bool, count=len(names))
        else:
            ok &= cols.values[spec.column] <= int(bound)
    return ok


def incumbent(cols: _Columns, subset: np.ndarray, limits: Limits, levels: list[str]) -> int | None:
    """The lexicographic best candidate of ``subset`` under ``limits``, read from the candidate table (numpy).

    Candidates breaking a limit are dropped, then the first of (levels[0], levels[1], rank) ascending wins: the
    same order CP-SAT minimises. It seeds CP-SAT (a solution hint) and is the answer, labelled ``feasible`` (not
    proven), when the time limit ends before CP-SAT has one. None when no candidate meets every limit.
    """
    return _table_best(cols, admitted(cols, subset, limits), levels)


def _table_best(cols: _Columns, ok: np.ndarray, levels: list[str]) -> int | None:
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return None
    order = np.lexsort((cols.rank[idx], cols.values[levels[1]][idx], cols.values[levels[0]][idx]))
    return int(idx[order[0]])


def _picks(cols: _Columns, idx: np.ndarray) -> tuple[cp_model.CpModel, dict, dict]:
    """(1) and (2) over the candidates ``idx``: the model, its pick literals and the lazily channelled x_k."""
    model = cp_model.CpModel()
    # pick[i] is 1 when candidate i is the plan
    pick = {int(i): model.new_bool_var(f"pick_{int(i)}") for i in idx}
    # (1) exactly one plan
    model.add_exactly_one(pick.values())
    # (2) decision variables channelled from the picks
    return model, pick, _Channels(model, cols, idx, list(pick.values()))


def _add_rank(model: cp_model.CpModel, cols: _Columns, idx: np.ndarray, pick: dict, x: dict) -> None:
    """rank: deterministic tie-break among plans equal in cost and time."""
    x["rank"] = model.new_int_var(0, max(len(cols.rank) - 1, 0), "x_rank")
    model.add(x["rank"] == cp_model.LinearExpr.weighted_sum(list(pick.values()), cols.rank[idx].tolist()))


def _build(cols: _Columns, subset: np.ndarray, limits: Limits) -> tuple[cp_model.CpModel, dict, dict, dict]:
    """The full model (1)-(8) over ``subset``, every limit behind its assumption literal (to name a core)."""
    idx = np.flatnonzero(subset)
    model, pick, x = _picks(cols, idx)
    lits: dict[str, cp_model.IntVar] = {}
    for name in limits.active():
        lits[name] = model.new_bool_var(f"a_{name}")
    # (3)-(8) the registry's limits: allow-lists ban the candidates whose name is not listed, bounds cap a column
    for spec in limits.specs():
        bound = getattr(limits, spec.key)
        if spec.kind == "names":
            banned = [pick[int(i)] for i in idx if cols.names[spec.column][int(i)] not in bound]
            model.add(sum(banned) == 0).only_enforce_if(lits[spec.key])
        else:
            model.add(x[spec.column] <= int(bound)).only_enforce_if(lits[spec.key])
    _add_rank(model, cols, idx, pick, x)
    return model, pick, lits, x


def _build_admitted(cols: _Columns, ok: np.ndarray) -> tuple[cp_model.CpModel, dict, dict]:
    """The same model with every limit applied as it is stated: only the admitted candidates get a pick.

    (3)-(8) hold for exactly the candidates :func:`admitted` keeps, so fixing the others' picks to 0 (leaving them
    out) is the model with every assumption literal true; without assumptions CP-SAT presolves it fully.
    """
    idx = np.flatnonzero(ok)
    model, pick, x = _picks(cols, idx)
    _add_rank(model, cols, idx, pick, x)
    return model, pick, x


def _solver(settings: SolverSettings, time_limit_s: float) -> cp_model.CpSolver:
    s = cp_model.CpSolver()
    s.parameters.max_time_in_seconds = max(time_limit_s, 1e-6)
    s.parameters.num_workers = settings.workers
    s.parameters.random_seed = settings.seed
    # CP-SAT would install its own SIGINT handler in every process that solves; in a forked batch worker that
    # registration can block on an allocator lock for good (issue 12 item 2). Ctrl-C is the CLI's to handle.
    s.parameters.catch_sigint_signal = False
    return s


def status_of(code: int) -> Status | None:
    """Map a CP-SAT status to ours; None means CP-SAT stopped before finding any solution.

    OPTIMAL -> optimal, FEASIBLE (stopped early by the time limit) -> feasible, INFEASIBLE -> infeasible,
    UNKNOWN -> None. MODEL_INVALID is a bug in _build, not a user error, and raises RuntimeError.
    """
    if code == cp_model.OPTIMAL:
        return Status.optimal
    if code == cp_model.FEASIBLE:
        return Status.feasible
    if code == cp_model.INFEASIBLE:
        return Status.infeasible
    if code == cp_model.UNKNOWN:
        return None
    raise RuntimeError(f"CP-SAT rejected the model (status {code}); this is a bug in solver._build")


def solve(space: Space, objective: Objective, limits: Limits, settings: SolverSettings = SolverSettings(),
          subset: np.ndarray | None = None, tolerance: float = 0.0, core: bool = False) -> Outcome:  # fmt: skip
    """Lexicographic optimum over the candidates in ``subset`` (default all) under ``limits``.

    ``tolerance`` (the scenario's, docs/trade-offs.md): after the first level's optimum v*, the first objective is
    bounded by floor(v* x (1 + tolerance)) instead of fixed at v*; the other objective is minimised within that
    band, then the first objective again, then rank. 0 is the plain lexicographic optimum.

    The limits are read off the candidate table first (:func:`admitted`, exact: each of (3)-(8) compares one
    column of one candidate). When some candidate meets them all, CP-SAT proves the optimum on the model over
    those candidates (:func:`_build_admitted`: the limits hold as stated, so no assumption literal is needed and
    presolve is not held back by them), seeded with the table's own best (:func:`incumbent`). When none does, the
    scenario is infeasible; ``core`` asks CP-SAT for a sufficient core of assumption literals on the full model
    (:func:`_build`; explain.py shrinks it), else ``binding`` lists every active limit (all of them together
    exclude every candidate).

    ``settings.time_limit_s`` bounds the whole call. When CP-SAT stops early with a solution the outcome is
    ``feasible`` with the proven lower bound of the first objective (cents or seconds); when it stops before
    finding any, the answer is :func:`incumbent` (feasible; bound: CP-SAT's, at least the subset's minimum).
    A later (tie-break) level cut short keeps the previous level's plan.
    """
    started = time.monotonic()
    n = len(space.cand)
    subset = np.ones(n, dtype=bool) if subset is None else subset
    if n == 0 or not subset.any():
        return Outcome(Status.infeasible, None)
    cols = columns(space)
    levels = ["cost_cents", "time_s"] if objective is Objective.cost else ["time_s", "cost_cents"]
    # with a tolerance: min first, min second within the band, min first again (second fixed), min rank
    names = [levels[0], levels[1], levels[0], "rank"] if tolerance > 0 else [levels[0], levels[1], "rank"]
    ok = admitted(cols, subset, limits)
    meets = ok.copy()  # every candidate meeting the limits (the halving steps below choose among them)
    best = _table_best(cols, ok, levels)
    if best is None:
        return _infeasible(cols, subset, limits, names, settings, started) if core else \
            Outcome(Status.infeasible, None, binding=limits.active())
    if time.monotonic() - started >= settings.time_limit_s:  # no time left to build a model
        value = int(cols.values[levels[0]][best])
        return Outcome(Status.feasible, best, value, float(min(int(cols.values[levels[0]][subset].min()), value)))
    model, pick, x = _build_admitted(cols, ok)
    model.add_hint(pick[best], 1)
    status = Status.optimal
    chosen: int | None = None
    first_value: int | None = None
    first_bound: float | None = None
    stages = [x[name] for name in names]
    for level, var in enumerate(stages):
        model.minimize(var)
        if settings.model_path and level == 0:
            model.export_to_file(settings.model_path)
        solver = _solver(settings, settings.time_limit_s - (time.monotonic() - started))
        result = status_of(solver.solve(model))
        if result is Status.infeasible:  # one admitted candidate satisfies every constraint of this model
            raise RuntimeError("CP-SAT found the admitted candidates infeasible; this is a bug in solver._build")
        if result is None and chosen is None:  # the time limit ended before CP-SAT had any plan
            low = int(cols.values[levels[0]][subset].min())  # every plan is one of the subset
            bound = solver.best_objective_bound if math.isfinite(solver.best_objective_bound) else low
            value = int(cols.values[levels[0]][best])
            return Outcome(Status.feasible, best, value, float(min(max(low, bound), value)))
        if result is None:  # a tie-break level cut short keeps the previous level's plan
            status = Status.feasible
            break
        chosen = next(i for i, v in pick.items() if solver.boolean_value(v))
        value = int(solver.value(var))
        if level == 0:
            first_value, first_bound = value, float(solver.best_objective_bound)
        if result is Status.feasible:
            status = Status.feasible
            break
        column = cols.rank if names[level] == "rank" else cols.values[names[level]]
        if level == 0 and tolerance > 0:
            bound = band_limit(value, tolerance)
            ok &= column <= bound
            model.add(var <= bound)
        else:
            ok &= column == value
            model.add(var == value)
        if np.count_nonzero(ok) == 1 and ok[chosen]:  # one admitted candidate left: the later levels are decided
            break
    if tolerance > 0 and status is Status.optimal and chosen is not None:
        chosen = halving_steps(cols, meets, levels, chosen, tolerance)
    return Outcome(status, chosen, first_value, first_bound)


def halving_steps(cols: _Columns, meets: np.ndarray, levels: list[str], chosen: int, tolerance: float) -> int:
    """The tolerance rule's second part (docs/trade-offs.md): no plan pays for a small saving with twice the wait.

    While some candidate meeting the limits is at most ``tolerance`` worse than the chosen one on the first
    objective (floor(v x (1 + tolerance))) and at least twice as good on the other (2 w' <= w), move to the best
    such candidate on the other objective (then the first, then rank). Each step halves the other objective, so
    the steps end; each is exact over the candidate table (integer cents and seconds, as CP-SAT sees them).
    """
    first, second = cols.values[levels[0]], cols.values[levels[1]]
    while True:
        near = meets & (first <= band_limit(int(first[chosen]), tolerance)) & (2 * second <= int(second[chosen]))
        if not near.any():
            return chosen
        idx = np.flatnonzero(near)
        chosen = int(idx[np.lexsort((cols.rank[idx], first[idx], second[idx]))[0]])


def _infeasible(cols: _Columns, subset: np.ndarray, limits: Limits, names: list[str], settings: SolverSettings,
                started: float) -> Outcome:  # fmt: skip
    """No candidate of ``subset`` meets every limit: the core CP-SAT names on the full model (1)-(8).

    The model is the one the first lexicographic level states (its objective channelled and minimised), with every
    limit behind an assumption literal; CP-SAT proves it infeasible and returns a sufficient subset of the
    literals. Out of time first: every active limit.
    """
    left = settings.time_limit_s - (time.monotonic() - started)
    if left <= 0:
        return Outcome(Status.infeasible, None, binding=limits.active())
    model, _, lits, x = _build(cols, subset, limits)
    model.add_assumptions(list(lits.values()))
    stages = [x[name] for name in names]
    model.minimize(stages[0])
    if settings.model_path:
        model.export_to_file(settings.model_path)
    solver = _solver(settings, left)
    if status_of(solver.solve(model)) is Status.infeasible:
        return Outcome(Status.infeasible, None, binding=_core(solver, lits))
    return Outcome(Status.infeasible, None, binding=limits.active())  # stopped before the proof: all of them


def band_limit(optimum: int, tolerance: float) -> int:
    """The largest first-objective value within ``tolerance`` of the optimum: floor(optimum x (1 + tolerance))."""
    return int(math.floor(round(optimum * (1.0 + tolerance), 6)))


def _core(solver: cp_model.CpSolver, lits: dict[str, cp_model.IntVar]) -> list[str]:
    by_index = {v.index: k for k, v in lits.items()}
    return sorted(by_index[i] for i in solver.sufficient_assumptions_for_infeasibility() if i in by_index)
