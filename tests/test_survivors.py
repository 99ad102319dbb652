"""Bugs that once survived the whole suite, each pinned by a test that fails with the bug planted (issue 16).

- money rounded down (solver.cents flooring): a plan a fraction of a cent over the budget passed;
- launch files whose batch arithmetic disagrees with the plan (HF gradient_accumulation_steps = grad_accum x dp):
  nothing parsed the written files against micro_batch x grad_accum x dp = global_batch;
- the first 1F1B pipeline stage holding one micro-batch of activations instead of min(pp, grad_accum).
(The fourth, a Pareto sweep that never ends, is in test_pareto.py.)
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from optimizer.inputs.catalog import load_catalog
from optimizer.inputs.schema import Status
from optimizer.models import activations
from optimizer.solve.planner import prepare, solve_scenario
from optimizer.solve.validator import check_plan, priced

from .conftest import scenario_doc
from .memory_builders import cfg, consts, job

# ------------------------------------------------------------------------------------------------ budget rounding


def _per_second_offer(tmp_path: Path, increment_s: int = 1) -> tuple[str, object]:
    """An offers file with one A100-80G offer at 1.37 an hour, billed per ``increment_s`` seconds (per second by
    default: fractions of a cent per bill)."""
    base = next(o for o in load_catalog().offers if o.gpu == "A100-80G")
    price = next(iter(base.prices.values())).model_copy(update={"amount": 1.37})
    doc = base.model_dump(mode="json", exclude_none=True)
    doc.update(id="test-per-second", hour_increment_s=increment_s, max_nodes=1, cards_per_node=8,
               prices={"hour": price.model_dump(mode="json")})  # fmt: skip
    doc.pop("inter_node_gb_per_s", None)
    offer = type(base).model_validate(doc)
    path = tmp_path / "offers.yaml"
    doc = {"schema_version": 1, "currency": base.currency,
           "offers": [offer.model_dump(mode="json", exclude={"currency"}, exclude_none=True)]}  # fmt: skip
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    return str(path), offer


def test_a_plan_a_fraction_of_a_cent_over_the_budget_is_not_chosen(write_scenario, tmp_path):
    catalog, offer = _per_second_offer(tmp_path)

    def best(name: str, **changes):
        return solve_scenario(write_scenario(name, catalog=catalog, allow={"gpus": ["A100-80G"]}, **changes)).best

    def exact_total(est) -> Fraction:
        return priced(est.plan.billed_units, offer) * est.plan.cards

    free = best("free.yaml")
    cost = exact_total(free)
    assert (cost * 100).denominator != 1, f"precondition: {float(cost)} has no fraction of a cent"
    below = Fraction(math.floor(cost * 100), 100)  # the budget: the cheapest cost rounded down to the cent
    currency = free.cost.currency
    tight = best("tight.yaml", budget={"amount": float(below), "currency": currency})
    assert tight.status is Status.infeasible or exact_total(tight) <= below, (
        f"budget {below} {currency}: chose a plan costing {float(exact_total(tight)):.6f}"
    )
    # the validator, re-checking the free plan against the tight budget, flags it (exact decimal ceiling)
    sc, cat, _ = prepare(write_scenario("check.yaml", catalog=catalog, allow={"gpus": ["A100-80G"]},
                                        budget={"amount": float(below), "currency": currency}))  # fmt: skip
    assert any("exceeds the budget" in v for v in check_plan(sc, cat, free)), check_plan(sc, cat, free)
    # one cent more admits the plan again (the test does not pass merely by turning infeasible)
    ok = best("ok.yaml", budget={"amount": float(below + Fraction(1, 100)), "currency": currency})
    assert ok.plan is not None and exact_total(ok) == cost


def test_a_budget_with_a_fraction_of_a_cent_is_rounded_down(write_scenario, tmp_path):
    # hourly billing at 1.37: every bill is whole cents; a budget half a cent below the cheapest bill must refuse
    # it (budget cents = floor), not round the budget up to that bill
    catalog, offer = _per_second_offer(tmp_path, increment_s=3600)

    def best(name: str, **changes):
        return solve_scenario(write_scenario(name, catalog=catalog, allow={"gpus": ["A100-80G"]}, **changes)).best

    free = best("free.yaml")
    cost = priced(free.plan.billed_units, offer) * free.plan.cards
    assert (cost * 100).denominator == 1
    budget = float(cost - Fraction(1, 200))
    tight = best("tight.yaml", budget={"amount": budget, "currency": free.cost.currency})
    assert tight.plan is None or priced(tight.plan.billed_units, offer) * tight.plan.cards <= Fraction(budget)


# ------------------------------------------------------------------------------------------------ launch batch sizes


def _find(doc, key: str) -> list:
    """Every value stored under ``key`` anywhere in a nested YAML/JSON document."""
    found = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            found += [v] if k == key else []
            found += _find(v, key)
    elif isinstance(doc, list):
        for v in doc:
            found += _find(v, key)
    return found


def _one(doc, key: str) -> int:
    values = _find(doc, key)
    assert values and len(set(map(str, values))) == 1, f"{key}: {values}"
    return int(values[0])


def _world_size(doc) -> int:
    """Processes the written launch command starts (accelerate --num_processes, torchrun nnodes x nproc_per_node)."""
    text = " ".join(str(c) for c in _find(doc, "command"))
    if m := re.search(r"--num_processes (\d+)", text):
        return int(m.group(1))
    nodes, per_node = re.search(r"--nnodes (\d+)", text), re.search(r"--nproc_per_node (\d+)", text)
    assert nodes and per_node, text
    return int(nodes.group(1)) * int(per_node.group(1))


LAUNCH_CASES = {
    "hf-deepspeed": ({"framework": "hf", "sharding": "deepspeed"}, {"zero_stage": 2}),
    "hf-fsdp": ({"framework": "hf", "sharding": "fsdp"}, {"zero_stage": 3}),
    "hf-ddp": ({"framework": "hf"}, {"zero_stage": 0}),
    "torchtune": ({"framework": "torchtune"}, {"zero_stage": 3}),
    "nemo": ({"framework": "nemo"}, {"zero_stage": 1}),
}


@pytest.mark.parametrize("case", LAUNCH_CASES, ids=str)
def test_written_launch_files_reproduce_the_global_batch(case, write_scenario, run_cli, tmp_path: Path):
    # 4 GPUs, micro_batch 2, global batch 32: grad_accum must be 32 / (2 x 4) = 4 in every file that states it
    training, pins = LAUNCH_CASES[case]
    plan = {"gpu": "A100-80G", "cards": 4, "tp": 1, "micro_batch": 2, **pins}
    doc = scenario_doc(global_batch=32, training={**training, "optimizer": "adamw", "attention": "flash"}, plan=plan)
    out = tmp_path / "launch"
    done = run_cli("solve", write_scenario(doc=doc), "--launch-dir", out, "--json")
    assert done.exit_code == 0, done.stderr
    p = json.loads(done.stdout)["plan"]
    assert (p["dp"], p["micro_batch"], p["grad_accum"]) == (4, 2, 4)
    files = sorted(out.iterdir())
    assert files, "no launch file written"
    docs = {f.name: (json.loads(f.read_text()) if f.suffix == ".json" else yaml.safe_load(f.read_text()))
            for f in files}  # fmt: skip
    launch = docs["launch.yaml"]
    world = _world_size(launch)
    assert world == p["cards"]
    dp = world // (p["tp"] * p["pp"])
    checked = 0
    for name, d in docs.items():
        micro = _find(d, "per_device_train_batch_size") + _find(d, "train_micro_batch_size_per_gpu") + _find(
            d, "micro_batch_size") + _find(d, "batch_size")  # fmt: skip
        packed = _find(d, "packed_sequence_size")  # NeMo packs m rows of seq_len into one row of m x seq_len
        per_row = int(packed[0]) // int(doc["seq_len"]) if packed else 1
        micro = [int(m) * per_row for m in micro]
        for m in micro:
            assert int(m) == 2, f"{name}: micro-batch {m}"
        if _find(d, "gradient_accumulation_steps"):
            ga = _one(d, "gradient_accumulation_steps")
            assert int(micro[0]) * ga * dp == 32, f"{name}: {micro[0]} x {ga} x dp {dp} != global batch 32"
            checked += 1
        for key in ("train_batch_size", "global_batch_size"):
            if _find(d, key):
                assert _one(d, key) * per_row == 32, f"{name}: {key}"
                checked += 1
    assert checked >= 1, f"no file states the batch arithmetic: {list(docs)}"


# ------------------------------------------------------------------------------------------------ 1F1B activations


def _act(j, **kw) -> int:
    return int(activations.activation_bytes(j, cfg(**kw), consts())[0])


@pytest.mark.parametrize("checkpointing", ["none", "full"])
def test_first_1f1b_stage_holds_min_pp_grad_accum_micro_batches(checkpointing):
    # Narayanan et al. 2021: the first of p stages has min(p, GA) micro-batches in flight, each with the
    # activations of L/p layers. With GA >= p that is p x L/p = L layers' worth, the same bytes as pp = 1.
    # none: A = T x L_loc x c_layer, so A(p=4, GA=2) = A/2 and A(p=4, GA=1) = A/4 exactly (L = 32 layers).
    # full: A = T x (2h x L_loc + c_layer); the kept inputs scale with L_loc = 32, 16, 8 layers, so the steps
    # GA 8 -> 2 (16 layers of inputs) and GA 2 -> 1 (8 layers) differ by exactly a factor 2.
    j = job(framework="nemo", method="full")
    one = _act(j, pp=1, grad_accum=8, checkpointing=checkpointing)
    ga8, ga2, ga1 = (_act(j, pp=4, grad_accum=ga, checkpointing=checkpointing) for ga in (8, 2, 1))
    assert ga8 == one
    assert ga8 - ga2 == pytest.approx(2 * (ga2 - ga1), abs=2)
    if checkpointing == "none":
        assert (ga2, ga1) == (pytest.approx(one / 2, abs=1), pytest.approx(one / 4, abs=1))


def test_tp_divides_the_kv_heads_as_well_as_the_heads(write_scenario, catalog):
    # Grouped-query attention with 32 query heads and 4 KV heads: tp 8 divides the heads but not the KV heads (each
    # rank would hold half a KV head), so no layout may use it; tp 2 and 4 divide both. No catalog model tells the two
    # checks apart (for each, tp | heads already implies tp | kv_heads), hence the inline model.
    from optimizer.inputs.catalog import load_scenario, resolve_model
    from optimizer.solve.space import enumerate_all

    model = {"name": "gqa-32q-4kv", "layers": 16, "hidden": 4096, "intermediate": 11008, "heads": 32, "kv_heads": 4,
             "vocab": 32000, "tied_embeddings": False}  # fmt: skip
    path = write_scenario(model=model, method="full", lora=None, catalog="us",
                          training={"framework": "nemo", "optimizer": "adamw", "attention": "flash"},
                          allow={"gpus": ["H100-SXM"], "max_cards": 8})  # fmt: skip
    sc = load_scenario(path)
    _, _, _, ev = enumerate_all(sc, catalog, resolve_model(sc, catalog, path), str(path))
    tps = set(ev.cfg.tp.tolist())
    assert 8 not in tps and {2, 4} <= tps, sorted(tps)
