"""What-if hints on a solved plan: one engine setting the scenario left to its default that gives a better plan.

One hint today, the fused loss. Under hf the default loss (``training.loss`` auto: calibration
``memory.default_loss`` hf, standard) materialises the fp32 full-vocabulary logits (activations.logits_bytes:
12 B per logit); on long rows and large vocabularies they are the largest item on the card, and Liger's fused
linear cross-entropy (``training.loss: fused``, which the launch files write as use_liger_kernel) never holds
them. The scenario is solved a second time with it only when the chosen plan's logits are a large share of its
peak (:func:`worth_a_second_solve`), so most solves pay nothing; the hint is reported when that solve improves the
scenario's objective (:func:`hint`). The thresholds are calibration ``hints.fused_loss``: ftopt's own choice of
when a hint is worth a second solve, not measured figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optimizer.inputs.catalog import Catalog
from optimizer.inputs.schema import Framework, Loss, Objective, Scenario
from optimizer.models.engines import fused_loss_refusal
from optimizer.solve.explain import solve_with_setting, with_setting
from optimizer.solve.solver import Limits, SolverSettings
from optimizer.solve.space import Space, row_plan

SETTING, VALUE = "training.loss", "fused"
WHAT = "Liger's fused linear cross-entropy; pip install liger-kernel"
# the plan fields a hint names when the re-solved plan sets them otherwise (grad_accum follows micro_batch)
FIELDS = ("gpu", "cards", "tp", "pp", "zero_stage", "offload", "micro_batch", "checkpointing")
GIB = 2**30


def rule(calibration: Mapping[str, Any]) -> Mapping[str, float] | None:
    """The calibration's ``hints.fused_loss`` ({logits_share, min_saving}); None (no hint) where it has none."""
    return (calibration.get("hints") or {}).get("fused_loss")


def leaves_standard_loss(sc: Scenario, calibration: Mapping[str, Any]) -> bool:
    """Whether the scenario runs hf's default standard loss without having chosen it.

    Framework hf, ``training.loss`` auto (left out or written auto: the framework's choice; an explicit standard,
    chunked or fused is the user's and is kept) and calibration ``memory.default_loss`` hf standard (transformers'
    fp32-upcast cross-entropy).
    """
    if sc.training.framework is not Framework.hf or sc.training.loss is not Loss.auto:
        return False
    default = (calibration.get("memory") or {}).get("default_loss", {}).get(Framework.hf.value)
    return default == Loss.standard.value


def logits_share(space: Space, i: int) -> float:
    """Row ``i``'s logits over its per-GPU peak (memory ``logits`` / ``total``), 0 for an empty peak."""
    total = float(space.cand.mem["total"][i])
    return float(space.cand.mem["logits"][i]) / total if total > 0 else 0.0


def worth_a_second_solve(space: Space, catalog: Catalog, chosen: int) -> bool:
    """Whether to solve again with ``training.loss: fused``: all of the following hold.

    - the scenario runs hf's default standard loss without choosing it (:func:`leaves_standard_loss`);
    - the fused loss can run it (engines.fused_loss_refusal: no LoRA adapter on lm_head, a model type Liger patches);
    - the chosen plan's logits are at least calibration ``hints.fused_loss.logits_share`` of its per-GPU peak;
    - the whole catalog was searched (a search the time limit cut short proves nothing to compare with).
    """
    cal, sc = catalog.calibration, space.scenario
    limits = rule(cal)
    if limits is None or space.searched is not None or not leaves_standard_loss(sc, cal):
        return False
    if fused_loss_refusal(with_setting(sc, SETTING, VALUE), space.job.arch, catalog) is not None:
        return False
    return logits_share(space, chosen) >= float(limits["logits_share"])


def objective_value(space: Space, i: int, objective: Objective) -> float:
    """Row ``i``'s objective: its cost in the report currency (cost), or its wall-clock hours (time)."""
    return float(space.cost_total[i] if objective is Objective.cost else space.cand.time["hours"][i])


def saving(before: float, after: float) -> float:
    """The objective's fractional improvement, 1 - after / before (0 when before is 0)."""
    return 1.0 - after / before if before > 0 else 0.0


def plan_fields(space: Space, i: int) -> dict[str, Any]:
    """Row ``i``'s :data:`FIELDS`, as the plan writes them (space.row_plan)."""
    plan = row_plan(space, i)
    return {k: getattr(plan, k) for k in FIELDS}


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The plan fields the hinted plan sets otherwise, in :data:`FIELDS` order: [{field, from, to}]."""
    return [{"field": k, "from": _word(before[k]), "to": _word(after[k])} for k in FIELDS if before[k] != after[k]]


def _word(value: Any) -> Any:
    """An enum as its value (offload none), anything else as it is."""
    return getattr(value, "value", value)


def hint_text(doc: Mapping[str, Any], objective: Objective) -> str:
    """The report's line: the setting, the hinted plan's cost, hours and saving, its logits and what changes.

    E.g. 'training.loss: fused (Liger's ...) plans 41.25 USD, 6.0 h (4.6% cheaper): logits 1.2 GiB instead of
    13.9 GiB per GPU; offload none (was all), micro_batch 2 (was 1)'.
    """
    better = "cheaper" if objective is Objective.cost else "faster"
    moved = ", ".join(f"{c['field']} {c['to']} (was {c['from']})" for c in doc["changes"])
    bill = f"{doc['cost']:,.2f} {doc['currency']}"
    if doc["offer_currency"] != doc["currency"]:  # as the Cost line writes a bill: the offer's currency first
        bill = f"{doc['offer_cost']:,.2f} {doc['offer_currency']} (= {bill})"
    return (f"{doc['setting']}: {doc['value']} ({WHAT}) plans {bill}, "
            f"{doc['hours']:,.1f} h ({doc['saving']:.1%} {better}): logits {doc['logits_bytes'] / GIB:,.1f} GiB "
            f"instead of {doc['plan_logits_bytes'] / GIB:,.1f} GiB per GPU"
            + (f"; {moved}" if moved else ""))  # fmt: skip


def hint(space: Space, catalog: Catalog, source: str, limits: Limits, settings: SolverSettings, chosen: int,
         deadline: float | None = None) -> dict[str, Any] | None:  # fmt: skip
    """The fused-loss hint on the chosen plan (row ``chosen``), or None.

    Only when :func:`worth_a_second_solve`: the scenario is solved again with ``training.loss: fused``
    (explain.solve_with_setting: same catalog, overrides, overlay, limits, objective and tolerance); the hint is
    that plan when its objective is at least calibration ``hints.fused_loss.min_saving`` better than the chosen
    plan's. Costs in the report currency, hours of wall clock.
    """
    if not worth_a_second_solve(space, catalog, chosen):
        return None
    sc = space.scenario
    solved = solve_with_setting(space, catalog, source, limits, settings, SETTING, VALUE, sc.objective,
                                sc.tolerance, deadline)  # fmt: skip
    if solved is None or solved[1] is None or solved[0].searched is not None:
        return None
    wide, j = solved
    gain = saving(objective_value(space, chosen, sc.objective), objective_value(wide, j, sc.objective))
    if gain < float(rule(catalog.calibration)["min_saving"]):  # type: ignore[index]
        return None
    doc: dict[str, Any] = {
        "setting": SETTING, "value": VALUE, "objective": sc.objective.value,
        "cost": round(float(wide.cost_total[j]), 2), "currency": wide.currency,
        "offer_cost": round(float(wide.cost_total[j]) / wide.fx[int(wide.cand.offer_idx[j])], 2),
        "offer_currency": wide.offers[int(wide.cand.offer_idx[j])].currency,
        "hours": round(float(wide.cand.time["hours"][j]), 6), "saving": round(gain, 6),
        "logits_bytes": int(wide.cand.mem["logits"][j]), "plan_logits_bytes": int(space.cand.mem["logits"][chosen]),
        "changes": changes(plan_fields(space, chosen), plan_fields(wide, j)),
    }  # fmt: skip
    doc["text"] = hint_text(doc, sc.objective)
    return doc
