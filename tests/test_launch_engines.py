"""The solver never proposes a plan its engine cannot run: every engine x method x optimizer x technique.

The rules below are the libraries' own, written here from their sources, independently of calibration.yaml
``frameworks`` (which the space reads): HF Trainer with DeepSpeed/FSDP is data parallel only; ZeRO-Offload runs
DeepSpeed's CPU AdamW only and offloads parameters at stage 3 only (DeepSpeed config-json); FSDP offloads all or
nothing; torchtune 0.6.1 refuses fp16, optimizer_in_bwd with accumulation, activation offloading without
checkpointing, and shards (so offloads) full fine-tuning only with two or more ranks; Megatron-Core offloads the
optimizer under the distributed optimizer only, trains no 4-bit base and builds Adam or SGD only. Every candidate
the space keeps is checked, and so are the launch notes of the best plan.
"""

from __future__ import annotations

import itertools

import pytest

from optimizer.inputs.catalog import resolve_model
from optimizer.inputs.errors import InputError
from optimizer.launch import launch_settings
from optimizer.models.configs import CHECKPOINTING, OFFLOAD, OPTIMIZER, PRECISION
from optimizer.solve.planner import prepare, solve_scenario
from optimizer.solve.space import enumerate_all

ENGINES = ["hf_deepspeed", "hf_fsdp", "torchtune", "nemo"]
METHODS = ["full", "lora", "qlora"]
OPTIMIZERS = ["adamw", "sgd", "adamw_8bit"]
TECHNIQUES = [{}, {"activation_offload": True}, {"optimizer_in_backward": True}]


def _refused(engine: str, method: str, optimizer: str, technique: dict) -> bool:
    """Scenarios the engine cannot run whatever the plan (a one-line input error is the right answer)."""
    if engine == "nemo" and (method == "qlora" or optimizer != "adamw"):
        return True  # NeMo 2 LoRA has no 4-bit base; the distributed optimizer is Adam only
    in_bwd = technique.get("optimizer_in_backward", False)
    return in_bwd and not (engine == "torchtune" and method == "full")  # only torchtune's full recipe fuses it


def _violations(engine: str, method: str, optimizer: str, technique: dict, row: dict) -> list[str]:
    """What the engine refuses in one candidate (an empty list: it runs)."""
    out = []
    zero, offload, tp = row["zero_stage"], row["offload"], row["tp"]
    if engine != "nemo" and (tp != 1 or row["pp"] != 1):
        out.append(f"{engine} runs data parallel only, tp={tp}")
    if engine.startswith("hf") and row["checkpointing"] == "selective":
        out.append("transformers recomputes whole layers only")
    if engine == "hf_deepspeed" and offload != "none" and (optimizer != "adamw" or zero == 0):
        out.append(f"ZeRO-Offload with {optimizer} at stage {zero}")
    if engine == "hf_deepspeed" and offload == "all" and zero != 3:
        out.append("offload_param below stage 3")
    if engine in ("hf_fsdp", "torchtune") and offload != "none" and (zero, offload) != (3, "all"):
        out.append(f"FSDP offloads all or nothing, not ({zero}, {offload})")
    if engine in ("hf_fsdp", "torchtune") and offload != "none" and "8bit" in optimizer:
        out.append("bitsandbytes optimizers step on CUDA tensors only")
    if engine == "torchtune":
        if row["precision"] == "fp16" or row["checkpointing"] == "selective":
            out.append(f"torchtune: {row['precision']}, {row['checkpointing']}")
        if technique.get("optimizer_in_backward") and row["grad_accum"] != 1:
            out.append("optimizer_in_bwd with gradient accumulation")
        if technique.get("activation_offload") and row["checkpointing"] == "none":
            out.append("activation offloading without checkpointing")
        if method == "full" and offload != "none" and row["dp"] < 2:
            out.append("full_finetune_distributed offloads only with FSDP, i.e. two or more ranks")
    if engine == "nemo" and offload != "none" and (zero, offload) != (1, "optimizer"):
        out.append(f"Megatron optimizer offload at ({zero}, {offload})")
    return out


def _scenario(write_scenario, engine, method, optimizer, technique):
    framework, _, sharding = engine.partition("_")
    lora = None if method == "full" else {"rank": 16, "alpha": 32, "targets": ["all-linear"]}
    return write_scenario(f"{engine}-{method}-{optimizer}-{len(technique) and next(iter(technique))}.yaml",
                          model="Llama-3.2-3B", method=method, lora=lora, global_batch=16, catalog="us",
                          plan={"gpu": "H100-SXM"},
                          training={"framework": framework, "optimizer": optimizer, "attention": "sdpa",
                                    **({} if framework == "nemo" else {"sharding": sharding or "fsdp"}),
                                    **technique})  # fmt: skip


def _rows(ev):
    cfg = ev.cfg
    for i in map(int, ev.fits.nonzero()[0]):  # every candidate that fits, before dominance pruning
        yield {"tp": int(cfg.tp[i]), "pp": int(cfg.pp[i]), "dp": int(cfg.dp[i]), "zero_stage": int(cfg.zero_stage[i]),
               "offload": OFFLOAD[int(cfg.offload[i])].value, "grad_accum": int(cfg.grad_accum[i]),
               "checkpointing": CHECKPOINTING[int(cfg.checkpointing[i])].value,
               "precision": PRECISION[int(cfg.precision[i])].value,
               "optimizer": OPTIMIZER[int(cfg.optimizer[i])].value}  # fmt: skip


COMBOS = list(itertools.product(ENGINES, METHODS, OPTIMIZERS, range(len(TECHNIQUES))))


@pytest.mark.parametrize(("engine", "method", "optimizer", "technique"), COMBOS)
def test_the_space_keeps_only_what_the_engine_runs(write_scenario, engine, method, optimizer, technique):
    tech = TECHNIQUES[technique]
    path = _scenario(write_scenario, engine, method, optimizer, tech)
    sc, cat, source = prepare(path)
    if _refused(engine, method, optimizer, tech):
        with pytest.raises(InputError):
            enumerate_all(sc, cat, resolve_model(sc, cat, path), source)
        return
    _, _, _, ev = enumerate_all(sc, cat, resolve_model(sc, cat, path), source)
    assert ev.fits.any(), "every combination the engine runs has some plan here"
    bad = [(row, v) for row in _rows(ev) if (v := _violations(engine, method, optimizer, tech, row))]
    assert bad == []


@pytest.mark.parametrize("engine", ENGINES)
def test_the_best_plan_launches_without_a_refusal_note(write_scenario, engine):
    """The launch modules note what a library refuses ("does not run"); the solver's best plan has no such note."""
    path = _scenario(write_scenario, engine, "lora", "adamw", {})
    result = solve_scenario(path)
    notes = " ".join(launch_settings(result.scenario, result.best.plan, 8).get("notes", []))
    assert "does not run" not in notes and "raises" not in notes
