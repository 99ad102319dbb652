"""The launch settings under test: every shipped scenario, and pinned variants over engines and knobs.

Each case is solved by ftopt itself (``optimizer.solve.planner.solve_scenario``), so what is validated is what ``ftopt
solve
--launch-dir`` writes for the best plan. Variants pin the knobs (engine, ZeRO stage, offload, method, precision,
checkpointing, tp, cards and nodes) and leave the rest (micro-batch, accumulation) to the solver.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from optimizer.inputs.schema import Scenario
from optimizer.inputs.schema_plan import Plan
from optimizer.solve.planner import solve_scenario

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted((REPO / "scenarios").glob("*.yaml"))
_LORA = {"rank": 16, "alpha": 32, "targets": ["all-linear"], "dropout": 0.05}
_BASE: dict[str, Any] = {
    "model": "Llama-3.1-8B",
    "data": {"tokens": 2.0e7, "epochs": 1},
    "seq_len": 2048,
    "global_batch": 32,
    "catalog": "us",
}
_H100 = {"gpu": "H100-SXM", "offer": "aws-p5-h100"}
_A100 = {"gpu": "A100-80G", "offer": "aws-p4de-a100-80g"}
# aws-p5 and aws-p4de rent whole 8-card instances (sold_as: instance): pins of fewer cards rent GCP's a3-highgpu
# shapes, sold per card; FSDP's ZeRO-1/2 shards leave 8B full fine-tuning past an H100's memory at the p90 risk,
# so those run on H200s (same Hopper features), which RunPod rents per card
_H100_CARD = {"gpu": "H100-SXM", "offer": "gcp-a3-highgpu-h100"}
_H200 = {"gpu": "H200", "offer": "runpod-h200"}


def _variant(engine: str, method: str = "full", **plan: Any) -> dict[str, Any]:
    """A scenario document: engine hf_deepspeed | hf_fsdp | torchtune | nemo, the method, plan pins."""
    training: dict[str, Any] = dict(plan.pop("training", {}))
    framework, _, sharding = engine.partition("_")
    training.update(framework=framework)
    if framework != "nemo":  # training.sharding is hf's choice; torchtune runs FSDP, nemo refuses the field's fsdp
        training["sharding"] = sharding or "fsdp"
    training.setdefault("attention", "flash")
    doc = {**_BASE, "method": method, "training": training, "plan": {**_H100, "cards": 8, **plan}}
    if method != "full":
        doc["lora"] = _LORA
    return doc


def _variants() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    pairs = [(0, "none"), (1, "none"), (1, "optimizer"), (2, "none"), (2, "optimizer"), (3, "none"),
             (3, "optimizer"), (3, "all")]  # fmt: skip
    for zero, offload in pairs:
        method = "lora" if zero == 0 else "full"  # 8B full fine-tuning does not fit one 80 GB card without ZeRO
        out[f"ds-z{zero}-{offload}"] = _variant("hf_deepspeed", method, zero_stage=zero, offload=offload)
    out["ds-1gpu-z2-optimizer"] = _variant("hf_deepspeed", cards=1, **_H100_CARD, zero_stage=2, offload="optimizer")
    out["ds-1gpu-z0"] = _variant("hf_deepspeed", "lora", cards=1, **_H100_CARD, zero_stage=0, offload="none")
    out["ds-lora-z3"] = _variant("hf_deepspeed", "lora", zero_stage=3, offload="none")
    out["ds-qlora-z3"] = _variant("hf_deepspeed", "qlora", zero_stage=3, offload="none")
    out["ds-qlora-1gpu-z1"] = _variant("hf_deepspeed", "qlora", cards=1, **_H100_CARD, zero_stage=1, offload="none")
    out["ds-fp16"] = _variant("hf_deepspeed", zero_stage=2, offload="none", precision="fp16", **_A100)
    out["ds-fp32"] = _variant("hf_deepspeed", "lora", zero_stage=2, offload="none", precision="fp32", **_A100)
    out["ds-2nodes-z3"] = _variant("hf_deepspeed", cards=16, zero_stage=3, offload="none")
    out["ds-sgd-offload"] = _variant("hf_deepspeed", zero_stage=2, offload="optimizer",
                                     training={"optimizer": "sgd"})  # fmt: skip
    out["ddp-8gpu"] = _variant("hf_deepspeed", "lora", zero_stage=0, offload="none", training={"attention": "sdpa"})
    out["ddp-8bit-adamw"] = _variant("hf_deepspeed", "qlora", cards=2, **_H100_CARD, zero_stage=0, offload="none",
                                     training={"optimizer": "paged_adamw_8bit"})  # fmt: skip
    for zero, offload in [(2, "none"), (3, "none"), (3, "all")]:  # FSDP has no stage 1 (frameworks.zero_stages)
        gpu = _H200 if zero < 3 else {}
        out[f"fsdp-z{zero}-{offload}"] = _variant("hf_fsdp", zero_stage=zero, offload=offload, **gpu)
    out["fsdp-lora"] = _variant("hf_fsdp", "lora", zero_stage=3, offload="none")
    out["trl-act-offload"] = _variant("hf_deepspeed", "lora", zero_stage=2, offload="none",
                                      training={"activation_offload": True})  # fmt: skip
    out["fsdp-qlora"] = _variant("hf_fsdp", "qlora", zero_stage=3, offload="none")
    # an MoE model: its routed experts are LoRA target_parameters (Axolotl lora_target_parameters), not modules
    # (PEFT adapts those without dropout)
    out["fsdp-mixtral-lora"] = {**_variant("hf_fsdp", "lora", zero_stage=3, offload="none"), "model": "Mixtral-8x7B",
                                "lora": {**_LORA, "dropout": 0.0}}  # fmt: skip
    out["fsdp-1gpu"] = _variant("hf_fsdp", "lora", cards=1, **_H100_CARD, zero_stage=3, offload="none")
    out["fsdp-fp16"] = _variant("hf_fsdp", zero_stage=3, offload="none", precision="fp16", **_A100)
    out["fsdp-2nodes"] = _variant("hf_fsdp", cards=16, zero_stage=3, offload="none")
    # hybrid sharding (HSDP): accelerate HYBRID_SHARD, Axolotl dp_shard_size / dp_replicate_size
    out["fsdp-2nodes-hybrid"] = _variant("hf_fsdp", cards=16, zero_stage=3, offload="none", shard_group=8)
    out["fsdp-sync-each-batch"] = _variant("hf_fsdp", zero_stage=3, offload="none", micro_batch=1,
                                           training={"reduce_every_micro_batch": True})  # fmt: skip
    # all-linear with lm_head: written out as the projections plus lm_head (PEFT's all-linear skips the output)
    lm_head = {**_variant("hf_deepspeed", "lora", zero_stage=0, offload="none"),
               "lora": {**_LORA, "targets": ["all-linear", "lm_head"]}}  # fmt: skip
    out["ddp-lora-lm-head"] = lm_head
    out["tt-full-z3"] = _variant("torchtune", zero_stage=3, offload="none")
    out["tt-full-z2"] = _variant("torchtune", zero_stage=2, offload="none")
    out["tt-full-offload"] = _variant("torchtune", zero_stage=3, offload="all")
    out["tt-lora-1gpu"] = _variant("torchtune", "lora", cards=1, **_H100_CARD)
    out["tt-qlora-1gpu"] = _variant("torchtune", "qlora", cards=1, **_H100_CARD)
    out["tt-compile-act-offload"] = _variant("torchtune", training={"compile": True, "activation_offload": True})
    out["tt-in-bwd"] = _variant("torchtune", zero_stage=3, offload="none", training={"optimizer_in_backward": True})
    out["tt-fp32"] = _variant("torchtune", "lora", precision="fp32", **_A100)
    out["tt-adafactor"] = _variant("torchtune", "lora", training={"optimizer": "adafactor"})  # no fused argument
    out["tt-2nodes"] = _variant("torchtune", cards=16, zero_stage=3, offload="none")
    # one card: the single-device recipes, which alone step bitsandbytes' 8-bit optimizers (one_card_optimizers)
    out["tt-full-1gpu-8bit"] = _variant("torchtune", cards=1, **_H200, training={"optimizer": "paged_adamw_8bit"})
    out["tt-lora-1gpu-8bit"] = _variant("torchtune", "lora", cards=1, **_H100_CARD,
                                        training={"optimizer": "adamw_8bit"})  # fmt: skip
    for zero, offload in [(0, "none"), (1, "none"), (1, "optimizer"), (2, "none"), (3, "none")]:
        out[f"nemo-z{zero}-{offload}"] = _variant("nemo", zero_stage=zero, offload=offload)
    out["nemo-tp2"] = _variant("nemo", tp=2, zero_stage=1, offload="none")
    out["nemo-tp4-selective"] = _variant("nemo", tp=4, checkpointing="selective")
    out["nemo-fp8"] = _variant("nemo", precision="fp8", checkpointing="full")
    # hf has no fp8 switch: the files train the plan in bf16 (launch_common.half_bf16), which DeepSpeed must accept
    out["ds-fp8"] = _variant("hf_deepspeed", zero_stage=3, offload="none", precision="fp8")
    # the fused loss (Liger): use_liger_kernel, enable_liger_kernel and Axolotl's LigerPlugin must be accepted
    out["ds-liger"] = _variant("hf_deepspeed", "lora", zero_stage=2, offload="none", training={"loss": "fused"})
    out["nemo-fp16"] = _variant("nemo", precision="fp16", **_A100)
    out["nemo-lora"] = _variant("nemo", "lora", cards=1, **_H100_CARD)
    out["nemo-2nodes"] = _variant("nemo", cards=16, tp=8)
    out["nemo-pp2-interleaved"] = _variant("nemo", tp=2, pp=2, zero_stage=1, offload="none")
    # a Volta card (no FlashAttention 2, no bf16) under each engine, samples not packed, an -Instruct name
    # (the only V100 offer is the PCIe card; Llama is published in bf16, which Volta lacks: fp16 must be allowed)
    v100 = {"gpu": "V100-PCIe-32G", "offer": "akash-v100-32g-pcie"}
    fp16 = {"allow": {"fp16_for_bf16": True}}
    out["ddp-v100"] = {**_variant("hf_deepspeed", "lora", cards=2, zero_stage=0, offload="none", **v100), **fp16}
    out["fsdp-v100"] = {**_variant("hf_fsdp", "lora", cards=8, zero_stage=3, offload="none", **v100), **fp16}
    out["tt-v100"] = _variant("torchtune", "lora", cards=1, **v100)
    out["nemo-v100"] = {**_variant("nemo", "lora", cards=1, **v100), **fp16}
    # Blackwell and AMD cards (the us catalog rents both per card): what the settings ask of them is checked too
    b200 = {"gpu": "B200", "offer": "runpod-b200"}
    mi300x = {"gpu": "MI300X", "offer": "digitalocean-mi300x"}
    out["ds-b200"] = _variant("hf_deepspeed", "lora", cards=1, zero_stage=0, offload="none", **b200)
    out["fsdp-b200"] = _variant("hf_fsdp", cards=8, zero_stage=3, offload="none", **b200)
    out["ds-mi300x"] = _variant("hf_deepspeed", "lora", cards=1, zero_stage=0, offload="none", **mi300x)
    out["tt-mi300x"] = _variant("torchtune", "lora", cards=1, **mi300x)
    unpacked = {"samples": 20_000, "avg_tokens": 900.0, "epochs": 1, "packing": False}
    out["ds-unpacked"] = {**_variant("hf_deepspeed", "lora", zero_stage=2, offload="none"), "data": unpacked}
    out["tt-unpacked"] = {**_variant("torchtune", "lora", cards=1, **_H100_CARD), "data": unpacked}
    out["nemo-unpacked"] = {**_variant("nemo", zero_stage=1, offload="none"), "data": unpacked}
    out["tt-qwen-instruct"] = {**_variant("torchtune", "lora", cards=1, **_H100_CARD), "model": "Qwen2.5-7B-Instruct"}
    return out


VARIANTS = _variants()
CASE_IDS = [p.stem for p in SHIPPED] + sorted(VARIANTS)
WORKDIR = tempfile.mkdtemp(prefix="ftopt-launch-cases-")


def engine_of(name: str) -> str:
    """hf_deepspeed | hf_fsdp | torchtune | nemo for a case, read from its scenario without solving it."""
    doc = VARIANTS.get(name) or yaml.safe_load((REPO / "scenarios" / f"{name}.yaml").read_text())
    training = doc.get("training", {})
    framework = training.get("framework", "hf")
    return f"hf_{training.get('sharding', 'deepspeed')}" if framework == "hf" else framework


def ids_for(*engines: str) -> list[str]:
    """The case names whose engine is one of ``engines``."""
    return [n for n in CASE_IDS if engine_of(n) in engines]


@dataclass(frozen=True)
class Case:
    """One solved case: the scenario, the best plan, the launch settings and the offer's cards per node."""

    name: str
    scenario: Scenario
    plan: Plan
    settings: dict[str, Any]
    model: Any  # the architecture (ModelArch) the plan was priced for


@functools.cache
def solved(name: str) -> Case:
    """Solve a shipped scenario or a variant (written under WORKDIR) and return its launch settings."""
    from optimizer.inputs.catalog import load_catalog, resolve_model

    if name in VARIANTS:
        path = Path(WORKDIR) / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"name": name, **VARIANTS[name]}, sort_keys=False))
    else:
        path = REPO / "scenarios" / f"{name}.yaml"
    result = solve_scenario(path)
    assert result.best.plan is not None, f"{name}: the solver found no plan"
    catalog = load_catalog()
    return Case(name, result.scenario, result.best.plan, result.launch or {},
                resolve_model(result.scenario, catalog, path))  # fmt: skip


def checked_elsewhere(env_var: str, checker: Path, cases: dict[str, Any]) -> dict[str, str]:
    """Run ``checker`` (a check_runner script) with the python ``env_var`` names on ``cases``: name -> "ok" or error.

    For libraries that pin their own transformers (LLaMA-Factory, Axolotl) and so live in environments of their own.
    """
    python = os.environ.get(env_var)
    assert python, f"{env_var} must name the python of the library's environment (.ci/launch-check sets it)"
    work = Path(tempfile.mkdtemp(prefix="ftopt-check-"))
    (work / "cases.json").write_text(json.dumps(cases))
    subprocess.run([python, str(checker), str(work / "cases.json"), str(work / "results.json")], check=True,
                   timeout=900)  # fmt: skip
    return json.loads((work / "results.json").read_text())
