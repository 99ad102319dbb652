"""Why a scenario has no plan, and the smallest change that gives it one.

Three kinds of answer, each with numbers a user can apply as they are:

* the plan pins admit no configuration at all (tp not dividing the heads, a global batch that the pinned cards
  cannot split): an :class:`InputError` naming the pinned field, raised by :func:`check_pins`;
* nothing fits in memory: the memory the smallest configuration needs and the largest card offered (of the GPUs the
  scenario allows), and the GPUs on which some configuration fits when the GPU pin and the scenario's offer list are
  widened to every built-in offer, each with what stops it: a pin or allow.gpus, the most cards the scenario's
  catalog rents of it, or its absence from that catalog (then the built-in catalogs that rent it, to use or add);
* plans fit but the user's limits exclude them. The allow-lists (gpus, providers, max_cards, max_nodes) that
  exclude everything are found by solving with each limit behind an assumption literal (the CP-SAT core), then
  shrinking the core by re-solving without one member at a time. With those relaxed, the budget and the deadline
  are examined: ``budget_needed`` is the cost of the cheapest plan meeting the deadline, ``deadline_needed_hours``
  the time of the fastest plan within the budget; when neither alone helps, both come from one plan (the
  objective's optimum without either limit), so that applying the pair makes the scenario feasible.

Money is rounded up to the cent and time up to the second in the same way as the solver's coefficients, so a
budget or deadline set to the reported figure is met exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from optimizer.inputs.catalog import Catalog, builtin_offer_catalogs, default_offer_files, load_catalog
from optimizer.inputs.errors import FtoptError, InputError
from optimizer.inputs.schema import ModelArch, Objective, PlanPins, Precision, Scenario
from optimizer.inputs.schema_catalog import Gpu, Offer
from optimizer.solve.dominance import relevant
from optimizer.solve.explain_relax import (
    Option,
    hours_needed,
    names_with_plan,
    single_options,
    tradeoff,
    tradeoff_text,
)
from optimizer.solve.limits import MONOTONE, REGISTRY, column, limits_from
from optimizer.solve.solver import Limits, SolverSettings, solve
from optimizer.solve.space import Space, build, card_counts, memory_risk, tp_limit

# Limits field -> the scenario field a user edits to relax it; the allow-lists are the limits not monotone in cost
FIELD_OF = {spec.key: spec.field for spec in REGISTRY}
_ALLOW = tuple(spec.key for spec in REGISTRY if spec.kind != "space" and not spec.monotone)


@dataclass
class Relaxation:
    """Why a scenario is infeasible and the smallest change that makes it feasible."""

    binding: list[str]  # scenario fields to relax (``budget.amount``, ``allow.gpus``) or ``memory``
    message: str
    budget_needed: float | None = None  # in the report currency
    deadline_needed_hours: float | None = None
    memory_needed_bytes: int | None = None
    gpus_that_fit: list[str] = field(default_factory=list)
    options: list[Option] = field(default_factory=list)  # every single-limit change that restores a plan
    tradeoff: list[tuple[float, float]] = field(default_factory=list)  # (cost, hours) front when both bind


# ------------------------------------------------------------------------------------------------ pins


def _divisors(n: int, limit: int = 64) -> str:
    return ", ".join(str(d) for d in range(1, min(n, limit) + 1) if n % d == 0)


def _layout_problem(p: PlanPins, arch: ModelArch, offers: list[Offer], gpus: list[Gpu]) -> tuple[str, str] | None:
    """tp, cards, dp and nodes pins that no offer can host."""
    tp, pp = p.tp or 1, p.pp or 1
    if p.tp and (arch.heads % p.tp or arch.kv_heads % p.tp):
        return "plan.tp", (f"tp={p.tp} must divide the attention heads ({arch.heads}) and kv_heads ({arch.kv_heads}) "
                           f"of {arch.name}; allowed: {_divisors(arch.kv_heads)}")  # fmt: skip
    widest = max((tp_limit(o, g) for o, g in zip(offers, gpus, strict=True)), default=1)
    if p.tp and p.tp > widest:
        return "plan.tp", (f"tp={p.tp} exceeds the NVLink domain of every offered card (tensor parallelism stays "
                           f"inside one NVLink domain); allowed here: tp <= {widest}")  # fmt: skip
    most_cards = max((o.cards_per_node * o.max_nodes for o in offers), default=0)
    if p.cards and p.cards > most_cards:
        return "plan.cards", f"cards={p.cards} is more than any offer rents (at most {most_cards} cards)"
    if p.cards and offers and all(p.cards % o.unit_cards for o in offers):
        sizes = ", ".join(str(n) for n in sorted({o.unit_cards for o in offers}))
        return "plan.cards", (f"cards={p.cards} splits an instance: the offers rent whole instances of {sizes} "
                              "cards only (sold_as: instance); pin a multiple")  # fmt: skip
    if p.cards and p.cards % (tp * pp):
        return "plan.cards", f"cards={p.cards} must be a multiple of tp x pp = {tp * pp}"
    if p.cards and p.dp and p.dp * tp * pp != p.cards:
        return "plan.dp", f"dp={p.dp} must equal cards / (tp x pp) = {p.cards // (tp * pp)}"
    most_nodes = max((o.max_nodes for o in offers), default=0)
    if p.nodes and p.nodes > most_nodes:
        return "plan.nodes", f"nodes={p.nodes} is more than any offer rents (at most {most_nodes} nodes)"
    if p.nodes and p.cards and not any(-(-p.cards // o.cards_per_node) == p.nodes for o in offers):
        return "plan.nodes", f"nodes={p.nodes} does not match cards={p.cards} on any offer's cards per node"
    return None


def _batch_problem(p: PlanPins, gb: int) -> tuple[str, str] | None:
    """micro_batch x grad_accum x dp = global_batch cannot hold with the pinned values."""
    tp, pp = p.tp or 1, p.pp or 1
    dp = p.dp or (p.cards // (tp * pp) if p.cards else None)
    if dp and gb % dp:
        return "global_batch", (f"global_batch {gb} must be divisible by dp = {dp} (micro_batch x grad_accum x dp = "
                                f"global_batch); use a multiple of {dp} or pin other cards")  # fmt: skip
    per_rank = gb // dp if dp else gb
    for name, value in (("micro_batch", p.micro_batch), ("grad_accum", p.grad_accum)):
        if value and per_rank % value:
            return f"plan.{name}", (f"{name}={value} must divide global_batch / dp = {per_rank}; "
                                    f"allowed: {_divisors(per_rank)}")  # fmt: skip
    if p.grad_accum and p.micro_batch and dp and p.micro_batch * p.grad_accum * dp != gb:
        product = p.micro_batch * p.grad_accum * dp
        return "plan.grad_accum", f"micro_batch x grad_accum x dp = {product} must equal global_batch {gb}"
    return None


def precision_problem(precision: Precision, gpus: list[Gpu]) -> str:
    """Why a pinned precision runs on none of ``gpus`` (the GPUs of the offers the pins leave): what each runs.

    'A100-80G has no native fp8; it runs bf16, fp16, fp32: pin one of them, or a GPU with fp8' for one GPU type
    (the pinned one); for several, 'none of the offered GPUs runs fp8 natively: A100-80G runs bf16, fp16, fp32;
    V100-32G runs fp16, fp32; ...'.
    """
    runs: dict[str, list[str]] = {}
    for g in sorted(gpus, key=lambda g: g.id):
        runs.setdefault(g.id, [q.value for q in Precision if g.peak_tflops(q)])
    want = precision.value
    if len(runs) == 1:
        ((gpu, native),) = runs.items()
        return f"{gpu} has no native {want}; it runs {', '.join(native)}: pin one of them, or a GPU with {want}"
    each = "; ".join(f"{gpu} runs {', '.join(native)}" for gpu, native in runs.items())
    return f"none of the offered GPUs runs {want} natively: {each}; pin one of those, or offer a GPU with {want}"


def pin_problem(sc: Scenario, arch: ModelArch, offers: list[Offer], gpus: list[Gpu]) -> tuple[str, str]:
    """(field, message) explaining why the ``plan:`` pins admit no configuration on any offer."""
    p: PlanPins = sc.plan
    if (arch.torch_dtype == "bfloat16" and p.precision is None and not sc.allow.fp16_for_bf16 and gpus
            and not any(g.native_bf16 for g in gpus)):
        names = ", ".join(sorted({g.id for g in gpus}))
        return "allow.fp16_for_bf16", (f"{arch.name} is published in bfloat16 and no offered GPU ({names}) has bf16: "
                                       "set allow.fp16_for_bf16: true to train it in fp16 (overflow risk, "
                                       "docs/precision.md) or allow a GPU with bf16")  # fmt: skip
    found = _layout_problem(p, arch, offers, gpus) or _batch_problem(p, sc.global_batch)
    if found:
        return found
    if p.nodes and not p.cards:
        return "plan.nodes", (f"nodes={p.nodes} matches none of the card counts tried (whole nodes in powers of "
                              "two, or the offer's maximum); pin cards as well")  # fmt: skip
    if p.precision and not any(g.peak_tflops(p.precision) for g in gpus):
        return "plan.precision", precision_problem(p.precision, gpus)
    if not p.cards and offers and all(o.sold_as == "instance" for o in offers):
        counts = ", ".join(str(c) for c in sorted({c for o in offers for c in card_counts(o, None)}))
        why = (f"global_batch {sc.global_batch} cannot be split over the whole instances offered ({counts} cards; "
               "micro_batch x grad_accum x dp = global_batch with dp = cards / (tp x pp)); use a global_batch these "
               "card counts divide, or offers sold per card")  # fmt: skip
        return "global_batch", why
    return "plan", "the pinned values admit no configuration on any offer; unpin some of them"


def check_pins(space: Space, source: str) -> None:
    """Raise InputError naming the pinned field when the space has no configuration, or none priced."""
    sc = space.scenario
    if space.enumerated == 0:
        raise InputError(source, *pin_problem(sc, space.job.arch, space.offers, space.gpus))
    if len(space.cand) == 0 and space.fitting > 0 and sc.plan.term is not None:
        priced = sorted({t.value for o in space.offers for t in o.prices})
        raise InputError(source, "plan.term", f"no offer that fits prices the term '{sc.plan.term.value}'; "
                         f"terms offered: {', '.join(priced)}")  # fmt: skip


# ------------------------------------------------------------------------------------------------ memory


def _wide_catalog(catalog: Catalog) -> Catalog:
    """The catalog with every built-in offer file added (the scenario's own files first)."""
    own = list(catalog.offer_files)
    seen = {Path(f).resolve() for f in own}
    extra = [str(p) for p in default_offer_files() if p.resolve() not in seen]
    try:
        return load_catalog([*own, *extra])
    except FtoptError:  # e.g. an offer id of the user's file repeats a built-in one
        return load_catalog()


@dataclass(frozen=True)
class WideFit:
    """A GPU on which some configuration fits among every built-in offer, and where."""

    gpu: str
    cards: int  # the fewest cards of a fitting configuration
    offers: frozenset[str]  # ids of the offers with a fitting configuration


def wide_fits(space: Space, catalog: Catalog, source: str) -> list[WideFit]:
    """The GPUs on which some configuration fits when the GPU/offer pins are dropped and every offer is allowed."""
    sc = space.scenario
    wide = sc.model_copy(update={"plan": sc.plan.model_copy(update={"gpu": None, "offer": None})})
    try:
        sp = build(wide, _wide_catalog(catalog), space.job.arch, source)
    except FtoptError:
        return []
    rows: dict[str, list[tuple[int, str]]] = {}
    for i, cards in zip(sp.cand.offer_idx, sp.cand.cards, strict=True):
        offer = sp.offers[int(i)]
        rows.setdefault(offer.gpu, []).append((int(cards), offer.id))
    return [WideFit(g, min(c for c, _ in r), frozenset(o for _, o in r)) for g, r in sorted(rows.items())]


def admitted(space: Space, limits: Limits, gpu: str) -> bool:
    """The GPU passes the scenario's plan.gpu and plan.offer pins (the GPUs of space.offers) and allow.gpus."""
    pinned = space.scenario.plan.gpu is not None or space.scenario.plan.offer is not None
    return (not pinned or gpu in {g.id for g in space.gpus}) and (limits.gpus is None or gpu in limits.gpus)


def _names(gpus: list[str]) -> str:
    return gpus[0] if len(gpus) == 1 else f"one of {', '.join(gpus)}"


def _use_catalogs(names: list[str], verb: str) -> str:
    """'built-in catalog us offers it (use catalog: us or --add-catalog us)' for the built-in catalogs ``names``."""
    if not names:  # every offer outside the scenario's catalog is a built-in one: not reached
        return "offers outside the built-in catalogs do"
    first = names[0]
    return (f"built-in catalog{'s' if len(names) > 1 else ''} {', '.join(names)} {verb} "
            f"(use catalog: {first} or --add-catalog {first})")  # fmt: skip


def most_cards(gpu: str, catalog: Catalog) -> Offer:
    """The catalog's offer of ``gpu`` that rents the most cards (cards per node x max_nodes)."""
    return max((o for o in catalog.offers if o.gpu == gpu), key=lambda o: o.cards_per_node * o.max_nodes)


def fit_advice(fits: list[WideFit], space: Space, catalog: Catalog, limits: Limits) -> str:
    """Where the GPUs that would fit fit, and what the scenario must change for each (only what it lacks).

    Rules, per GPU: one that fits on an offer of the scenario's catalog is excluded by a pin (nothing in the
    catalog fits as pinned): set plan.gpu or allow.gpus to it, or, for the pinned GPU, unpin plan.offer. One the
    catalog offers but that fits only on other built-in catalogs' offers: when its fewest fitting cards exceed the
    most the catalog's offers of it rent, that limit; then the catalogs whose offers fit. One the catalog does not
    offer: the built-in catalogs that do. For the last two, a GPU the pins or allow.gpus exclude also needs them set;
    the GPUs the scenario allows come first.
    """
    where = builtin_offer_catalogs()
    own = {o.id for o in catalog.offers}
    here = {o.gpu for o in catalog.offers}
    mine = "the scenario's catalog" + (f" ({', '.join(Path(f).stem for f in catalog.offer_files)})"
                                       if catalog.offer_files else "")  # fmt: skip
    pin, offer_pin, parts = [], [], []
    away: dict[tuple[tuple[str, ...], bool], list[str]] = {}
    allowed = {f.gpu: admitted(space, limits, f.gpu) for f in fits}
    for f in sorted(fits, key=lambda f: not allowed[f.gpu]):
        ok = allowed[f.gpu]
        if f.offers & own:
            (offer_pin if ok else pin).append(f.gpu)
            continue
        cats = sorted({where[o] for o in f.offers if o in where})
        if f.gpu not in here:
            away.setdefault((tuple(cats), ok), []).append(f.gpu)
            continue
        o = most_cards(f.gpu, catalog)
        nodes = f"{o.max_nodes} node{'s' if o.max_nodes > 1 else ''} of {o.cards_per_node}"
        why = (f"fits only on {f.cards} cards or more, and {mine} rents it on at most "
               f"{o.cards_per_node * o.max_nodes} ({nodes})" if f.cards > o.cards_per_node * o.max_nodes
               else f"fits only on offers that {mine} does not have")  # fmt: skip
        raise_cards = limits.max_cards is not None and f.cards > limits.max_cards
        parts.append(f"{f.gpu} {why}: {_use_catalogs(cats, 'rents enough')}"
                     + ("" if ok else f", and set plan.gpu or allow.gpus to {f.gpu}")
                     + (f", and raise allow.max_cards to {f.cards}" if raise_cards else ""))  # fmt: skip
    for (cats, ok), gpus in away.items():
        one = len(gpus) == 1
        parts.append(f"{', '.join(gpus)} {'is' if one else 'are'} not in {mine}: "
                     f"{_use_catalogs(list(cats), 'offers it' if one else 'offer them')}"
                     + ("" if ok else f", then set plan.gpu or allow.gpus to {_names(gpus)}"))  # fmt: skip
    if offer_pin:
        parts.insert(0, f"other offers of {', '.join(offer_pin)} fit: unpin plan.offer")
    if pin:
        parts.insert(0, f"set plan.gpu or allow.gpus to {_names(pin)}")
    listed = f"GPUs that would fit (built-in offers): {', '.join(f.gpu for f in fits)}"
    if pin and len(parts) == 1:  # every one fits in the catalog and only a pin excludes it
        return f"{listed}; set plan.gpu or allow.gpus to one of them"
    return "; ".join([listed, *parts])


def ram_text(space: Space) -> str:
    """'...need more host RAM than their nodes have: ...' when configurations fitting their card were dropped for it."""
    if space.ram_short is None:
        return ""
    need, offer, have = space.ram_short
    return (f"configurations that fit their cards need more host RAM than their nodes have (the closest: "
            f"{need / 2**30:,.0f} GiB per node on {offer}, whose node has {have / 2**30:,.0f} GiB, stated by the "
            "offer or by the default rule for offers that state none: catalogs/calibration.yaml "
            "hosts.host_ram_default)")  # fmt: skip


# Engine settings that keep less on each card, tried when no configuration fits as set: (field, value, what it does,
# the frameworks that launch it). Each is offered only when the space rebuilt with it has a configuration that fits.
# The fused loss first: at long context the fp32 logits of a 128K vocabulary are the largest item on the card
# (32K tokens: about 47 GiB), and Liger's fused linear cross-entropy (transformers use_liger_kernel) never holds them.
SETTING_OPTIONS: tuple[tuple[str, bool | str, str, tuple[str, ...]], ...] = (
    ("training.loss", "fused", "the loss is computed from the last hidden states in chunks, never holding the "
     "full-vocabulary logits: Liger's fused linear cross-entropy, use_liger_kernel", ("hf",)),
    ("training.reduce_every_micro_batch", True, "FSDP then reduce-scatters the gradients every micro-batch, "
     "accelerate's sync_each_batch, instead of holding them unsharded through gradient accumulation", ("hf",)),
    ("training.sharding", "deepspeed", "DeepSpeed ZeRO keeps its gradients partitioned through accumulation",
     ("hf",)),
    ("training.sharding", "fsdp", "FSDP loads a 4/8-bit base once, through rank 0's host copy, where DeepSpeed "
     "ZeRO-3 first loads it whole on every GPU (memory.kbit_load_bytes)", ("hf",)),
)


def _gpu_ids(limits: Limits) -> list[str] | None:
    """allow.gpus as the solver limits hold it (canonical ids, sorted), None when every GPU is allowed."""
    return sorted(limits.gpus) if limits.gpus is not None else None


def with_setting(sc: Scenario, name: str, value: object) -> Scenario:
    """The scenario with one ``section.key`` setting (``training.loss``) set to ``value``, validated as on load."""
    section, key = name.split(".")
    part = getattr(sc, section)
    return sc.model_copy(update={section: type(part).model_validate({**part.model_dump(), key: value})})


def solve_with_setting(space: Space, catalog: Catalog, source: str, limits: Limits, settings: SolverSettings,
                       name: str, value: object, objective: Objective, tolerance: float = 0.0,
                       deadline: float | None = None) -> tuple[Space, int | None] | None:  # fmt: skip
    """The scenario solved again with one setting changed: (its rebuilt space, the chosen row or None).

    The same catalog (CLI overrides and calibration overlay included: ``space.scenario`` and ``catalog`` carry them)
    and the same limits (allow.gpus as ``limits`` holds it); CP-SAT sees the candidates that can be optimal
    (dominance.relevant, exact), as planner.solve_scenario's solve does. ``deadline`` (time.monotonic()) bounds the
    build as space.build's. None when the setting does not combine with the rest of the scenario (an input error,
    a refusal, a solver limit).
    """
    try:
        wide = build(with_setting(space.scenario, name, value), catalog, space.job.arch, source, deadline)
        if not len(wide.cand):
            return wide, None
        lim = limits_from(wide, _gpu_ids(limits))
        return wide, solve(wide, objective, lim, settings, relevant(wide, lim), tolerance).index
    except (FtoptError, ValidationError):
        return None


def setting_options(space: Space, catalog: Catalog, source: str, limits: Limits,
                    settings: SolverSettings) -> list[Option]:  # fmt: skip
    """The :data:`SETTING_OPTIONS` that give a plan, each alone (a configuration that fits and meets the limits)."""
    sc, found = space.scenario, []
    for name, value, what, frameworks in SETTING_OPTIONS:
        section, key = name.split(".")
        part = getattr(sc, section)
        if getattr(part, key) == value or sc.training.framework.value not in frameworks:
            continue
        solved = solve_with_setting(space, catalog, source, limits, settings, name, value, Objective.cost)
        has_plan = solved is not None and solved[1] is not None  # else the setting does not combine, or no plan
        if has_plan:
            shown = str(value).lower() if isinstance(value, bool) else value
            found.append(Option(name, value, f"set {name}: {shown} ({what})"))
    return found


def memory_advice(sc: Scenario) -> str:
    """What to change when no card holds the job, only the changes that would change something.

    Always a shorter seq_len; the lighter methods than the scenario's (full: lora or qlora; lora: qlora; qlora:
    none); and unpinning only the pins the scenario sets among cards, zero_stage and offload.
    """
    lighter = {"full": "use lora or qlora", "lora": "use qlora"}.get(sc.method.value)
    pinned = [k for k in ("cards", "zero_stage", "offload") if getattr(sc.plan, k) is not None]
    steps = ["shorten seq_len", *([lighter] if lighter else []), *([f"unpin {', '.join(pinned)}"] if pinned else [])]
    return (", ".join(steps[:-1]) + " or " + steps[-1]) if len(steps) > 1 else steps[0]


def explain_memory(space: Space, catalog: Catalog, source: str, limits: Limits,
                   settings: SolverSettings) -> Relaxation:  # fmt: skip
    """Nothing fits: the smallest per-GPU need, the largest card offered and the GPUs that would fit.

    The need and the largest card are those of the GPUs the scenario allows (offered, pinned, in allow.gpus); each
    GPU that would fit comes with what stops it (:func:`fit_advice`).
    """
    if space.ram_short is not None:  # some configurations fit their cards: host RAM is what binds
        return Relaxation(["host_ram"], f"no plan fits: {ram_text(space)}", memory_needed_bytes=space.ram_short[0])
    allowed = [g for g in space.gpus if admitted(space, limits, g.id)] or space.gpus
    needs = [space.smallest_need[g.id] for g in allowed if g.id in space.smallest_need]
    need = min(needs or space.smallest_need.values() or [0])
    largest = max(allowed, key=lambda g: g.memory_gib)
    usable = largest.memory_gib * (1 - space.scenario.headroom)
    fits = wide_fits(space, catalog, source)
    fit = [f.gpu for f in fits]
    ratio = memory_risk(space.scenario, {"accuracy": space.accuracy})
    risk = space.scenario.risk.value
    # space.memory_ratios: a plan whose memory band is wider (its cell) is fitted at more than the overall ratio
    at_risk = (f" ({need * ratio / 2**30:,.1f} GiB or more at risk {risk}: x {ratio:g}, more where a plan's memory "
               "band is wider)" if ratio != 1 else "")  # fmt: skip
    msg = (f"no configuration fits in memory: the smallest needs {need / 2**30:,.1f} GiB per GPU{at_risk}, the "
           f"largest offered "
           f"card ({largest.id}) has {usable:,.1f} GiB usable ({largest.memory_gib:g} GiB less "
           f"{space.scenario.headroom:.0%} headroom)")  # fmt: skip
    engine = setting_options(space, catalog, source, limits, settings)
    if fit:
        msg += f"; {fit_advice(fits, space, catalog, limits)}"
    elif not engine:
        msg += f"; no GPU in the catalog fits: {memory_advice(space.scenario)}"
    if engine:
        msg += f"; each of these alone gives a plan: {'; '.join(o.text for o in engine)}"
    return Relaxation(["memory"], msg, memory_needed_bytes=need, gpus_that_fit=fit, options=engine)


# ------------------------------------------------------------------------------------------------ limits


def _feasible(space: Space, objective: Objective, limits: Limits, settings: SolverSettings,
              subset: np.ndarray | None = None) -> int | None:  # fmt: skip
    return solve(space, objective, limits, settings, subset).index


def _shrink(space: Space, limits: Limits, settings: SolverSettings) -> list[str]:
    """A minimal set of allow-list limits that alone excludes every plan (CP-SAT core, then deletion filter)."""
    only_allow = limits.without(*MONOTONE)
    out = solve(space, Objective.cost, only_allow, settings, core=True)
    if out.index is not None:
        return []
    core = [n for n in out.binding if n in _ALLOW] or [n for n in _ALLOW if n in only_allow.active()]
    for name in list(core):
        trial = [n for n in core if n != name]
        kept = only_allow.without(*[n for n in only_allow.active() if n not in trial])
        if _feasible(space, Objective.cost, kept, settings) is None:
            core = trial
    return core


def _allowed_gpus(space: Space, limits: Limits, settings: SolverSettings) -> list[str]:
    """GPU ids with a plan under ``limits`` without the GPU allow-list."""
    gpu_of = [space.offers[int(i)].gpu for i in space.cand.offer_idx]
    return names_with_plan(space, limits.without("gpus"), settings, gpu_of)


def _money_needed(space: Space, i: int) -> float:
    return float(column(space, "budget_cents", np.array([i]))[0]) / 100.0


def _budget_deadline(space: Space, objective: Objective, lim: Limits, settings: SolverSettings,
                     rel: Relaxation) -> list[str]:  # fmt: skip
    """Fill ``rel`` with the budget and deadline that bind under ``lim`` (allow-lists already relaxed)."""
    sc, cur = space.scenario, space.currency
    has_b, has_d = lim.budget_cents is not None, lim.deadline_s is not None
    budget = f"{sc.budget.amount:,.2f} {cur}" if has_b and sc.budget else ""
    deadline = f"{sc.deadline_hours:g} h" if has_d else ""
    cheap = _feasible(space, Objective.cost, lim.without("budget_cents"), settings) if has_b else None
    fast = _feasible(space, Objective.time, lim.without("deadline_s"), settings) if has_d else None
    parts: list[str] = []
    if cheap is not None:
        rel.binding.append(FIELD_OF["budget_cents"])
        rel.budget_needed = _money_needed(space, cheap)
        meets = f" that meets the {deadline} deadline" if has_d else ""
        parts.append(f"budget too small: the cheapest plan{meets} costs {rel.budget_needed:,.2f} {cur} "
                     f"(budget {budget}); budget_needed = {rel.budget_needed:.2f}")  # fmt: skip
    if fast is not None:
        rel.binding.append(FIELD_OF["deadline_s"])
        rel.deadline_needed_hours = hours_needed(space, fast)
        within = f" within the {budget} budget" if has_b else ""
        parts.append(f"deadline too short: the fastest plan{within} takes {rel.deadline_needed_hours:g} h "
                     f"(deadline {deadline}); deadline_needed_hours = {rel.deadline_needed_hours:g}")  # fmt: skip
    if cheap is not None and fast is not None:
        parts.append("either change alone makes the scenario feasible")
    if cheap is None and fast is None:  # each limit alone excludes every plan: one plan gives both figures
        both = _feasible(space, objective, lim.without("budget_cents", "deadline_s"), settings)
        if both is not None:
            rel.binding += [FIELD_OF[n] for n in ("budget_cents", "deadline_s") if getattr(lim, n) is not None]
            rel.budget_needed = _money_needed(space, both) if has_b else None
            rel.deadline_needed_hours = hours_needed(space, both) if has_d else None
            parts.append(f"budget ({budget}) and deadline ({deadline}) are both too tight for every plan; the "
                         f"{objective.value}-optimal plan without them costs {_money_needed(space, both):,.2f} {cur} "
                         f"and takes {hours_needed(space, both):g} h: raise the budget and extend the deadline to "
                         "at least these")  # fmt: skip
            if has_b and has_d:
                rel.tradeoff = tradeoff(space, lim, settings)
                parts.append("or trade one against the other: any budget / deadline pair on the front admits a "
                             f"plan: {tradeoff_text(rel.tradeoff, cur)}")  # fmt: skip
    return parts


def explain(space: Space, objective: Objective, limits: Limits, settings: SolverSettings, catalog: Catalog,
            source: str = "scenario") -> Relaxation:  # fmt: skip
    """The binding constraints of an infeasible scenario and the relaxation that fixes each (module docstring)."""
    check_pins(space, source)
    if len(space.cand) == 0:
        rel = explain_memory(space, catalog, source, limits, settings)
        _add_options(rel, space, limits, settings, catalog, source)  # the host RAM limit may be what binds
        return rel
    allow_core = _shrink(space, limits, settings)
    rel = Relaxation([FIELD_OF[n] for n in allow_core], "")
    parts = []
    for name in allow_core:
        parts.append(f"{FIELD_OF[name]} excludes every plan that fits")
        if name == "gpus":
            others = limits.without(*[n for n in allow_core if n != "gpus"])
            loose = others.without(*MONOTONE)
            rel.gpus_that_fit = _allowed_gpus(space, others, settings) or _allowed_gpus(space, loose, settings)
            if rel.gpus_that_fit:
                parts[-1] += f" (GPUs with a plan: {', '.join(rel.gpus_that_fit)})"
    lim = limits.without(*allow_core)
    if _feasible(space, objective, lim, settings) is None:
        more = _budget_deadline(space, objective, lim, settings, rel)
        if allow_core and more:
            more[0] = f"with {', '.join(rel.binding[: len(allow_core)])} relaxed, {more[0]}"
        parts += more
    rel.message = "; ".join(parts) or "no plan meets the constraints"
    if space.ram_short is not None:
        rel.message += f"; {ram_text(space)}"
    _add_options(rel, space, limits, settings, catalog, source)
    rel.message += _fp16_note(space)
    return rel


def _fp16_note(space: Space) -> str:
    """Why offered cards without bf16 have no plan for a bfloat16-published model (docs/precision.md)."""
    sc, arch = space.scenario, space.job.arch
    if arch.torch_dtype != "bfloat16" or sc.allow.fp16_for_bf16 or sc.plan.precision is not None:
        return ""
    without = sorted({g.id for g in space.gpus if not g.native_bf16})
    if not without:
        return ""
    return (f"; {', '.join(without)} (no bf16) are not proposed for {arch.name}, published in bfloat16: "
            "allow.fp16_for_bf16: true admits them in fp16 (overflow risk, docs/precision.md)")


def _add_options(rel: Relaxation, space: Space, limits: Limits, settings: SolverSettings, catalog: Catalog,
                 source: str) -> None:  # fmt: skip
    """Fill ``rel.options`` with every single-limit change that restores a plan; the message names the others."""
    found = single_options(space, limits, settings, catalog, _gpu_ids(limits), source)
    rel.options = rel.options + found  # after any the explanation found itself (engine settings), already said
    others = [o.text for o in found if o.field not in rel.binding]
    if others:
        lead = "each of these alone also restores a plan" if rel.binding not in (["memory"], ["host_ram"]) \
            else "with room in host RAM"
        rel.message += f"; {lead}: {'; '.join(others)}"
