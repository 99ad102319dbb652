"""``ftopt probe``: the cheapest short trial that measures what a plan depends on, and the script that runs it.

1. Solve the scenario; the plan's per-GPU configuration is (GPU type, micro-batch, sequence length, ZeRO stage and
   offload, checkpointing, precision, optimizer, method).
2. The trial runs that configuration on the plan's offer with gradient accumulation 1 and d data-parallel cards:
   d = 1 without ZeRO (nothing per GPU depends on the card count); with ZeRO, the smallest power of two d dividing the
   plan's dp, within one node, for which the memory model says the trial fits (sharded states take 1/d per GPU, so
   fewer cards need more memory); on an offer sold as whole instances, d is a whole number of instances. The trial's
   per-GPU memory then differs from the plan's, which does not matter:
   the measurement calibrates the models on the trial's own configuration, and the corrected models predict the plan.
3. Its cost: the memory and time models' estimate of that configuration for warm-up + N steps, billed by the hour
   on the plan's offer (the estimate includes the model's start-up time and one checkpoint-save allowance).
4. What it can be worth: the plan's bill when its compute time is 10% longer (hours' = fixed + 1.1 x steps x step
   seconds), minus the plan's bill, both with the offer's cheapest cover (optimizer/models/cost.py); and the plan's
   cost band from its uncertainty.
5. ``DIR/probe.py`` (optimizer/measure/probe_script.py, standalone) and ``DIR/probe_config.json`` (the model as an HF
   config,
   the trial's settings, the kernel its GPU runs, the launch's DeepSpeed config and the measurement's scenario);
   ``python DIR/probe.py`` writes ``DIR/measurement.yaml``. The host RAM it prints is what the script takes
   (:func:`probe_host_ram`): it writes no model files or checkpoints.

The script runs HF Trainer (with PEFT, DeepSpeed or FSDP as the plan needs); a torchtune or NeMo plan is probed under
HF with the same sharding, so its measurement calibrates the hf group (import the engine's own log to calibrate its
group). Tensor and pipeline parallelism are not reproduced: such plans are refused with a one-line error.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from optimizer.inputs.atomic import safe_name, write_folder_atomic
from optimizer.inputs.errors import InputError, NoPlanError
from optimizer.inputs.schema import MAX_NAME, Attention, Framework, Method, ModelArch, Scenario, Sharding
from optimizer.inputs.schema_plan import Estimate, Plan
from optimizer.launch.ds_config import deepspeed_config
from optimizer.launch.fsdp_args import fsdp_plugin
from optimizer.launch.hf_args import load_dtype, use_reentrant
from optimizer.launch.lora_names import lora_config_targets, lora_names
from optimizer.measure.calibrate import scenario_document
from optimizer.models import cost, memory
from optimizer.solve.planner import Overrides, estimate_scenario, prepare, solve_scenario
from optimizer.solve.space import make_job

DEFAULT_STEPS = 20
DEFAULT_WARMUP = 5
TIME_ERROR = 0.10  # the time error whose price is shown ("a 10% time error on this plan is worth ...")
SCRIPT = Path(__file__).with_name("probe_script.py")  # copied out as DIR/probe.py, never imported here
EXCLUDED = ("name", "budget", "deadline_hours", "allow", "objective", "plan", "calibration")


@dataclass
class Probe:
    """A planned trial: the plan it serves, its own estimate and cost, and the files written."""

    scenario: str
    plan: Estimate
    trial: Estimate
    steps: int
    warmup: int
    out_dir: str
    worth: float  # plan's bill at +TIME_ERROR compute time minus its bill, in the plan's offer currency
    notes: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    host_ram: float = 0.0  # bytes per node the probe run needs on the host (probe_host_ram)

    def lines(self) -> list[str]:
        """What to rent, what it costs, what it can save, and the commands (for the terminal)."""
        p, t = self.plan.plan, self.trial
        assert p is not None and t.plan is not None and t.time is not None and t.cost is not None
        assert self.plan.cost is not None
        minutes = t.time.hours * 60.0
        cur = t.cost.currency
        billing = "at the hourly price" if t.plan.term in ("hour", "minute", "second") else f"billed by {t.plan.term}"
        launch = "python" if t.plan.cards == 1 else f"torchrun --nproc_per_node {t.plan.cards}"
        band = self.plan.uncertainty
        out = [
            f"Plan for {self.scenario}: {p.cards} x {p.gpu} ({p.offer}), dp {p.dp}, "
            f"ZeRO {p.zero_stage}/{p.offload.value}, micro-batch {p.micro_batch}, "
            f"{'no' if p.checkpointing.value == 'none' else p.checkpointing.value} checkpointing, {p.precision.value}; "
            f"{self.plan.cost.total:,.2f} {self.plan.cost.currency}",
            f"probe: {t.plan.cards} x {t.plan.gpu} for {minutes:,.0f} min ({self.warmup} warm-up + {self.steps} "
            f"measured steps of {t.time.step_seconds:.2f} s), {t.cost.total:,.2f} {cur} {billing}; "
            f"a {TIME_ERROR:.0%} time error on this plan is worth {self.worth:,.2f} {self.plan.cost.currency}"
            + (" (the longer run stays inside the billing units already paid)" if self.worth == 0 else ""),
        ]
        if band is not None:
            out.append(f"  the plan's cost band today (10th-90th percentile): {band.cost.total_p10:,.2f}-"
                       f"{band.cost.total_p90:,.2f} {band.cost.currency}; own measurements narrow it")  # fmt: skip
        out.append(f"  the probe run needs about {self.host_ram / 2**30:,.1f} GiB of host RAM per node and writes no "
                   "model files or checkpoints (random weights built where they train; disk: the Python packages)")
        out += [f"  note: {n}" for n in self.notes]
        out += [
            f"Wrote {self.out_dir}/probe.py and probe_config.json. On the rented card:",
            f"  pip install {' '.join(self.packages)}",
            f"  {launch} probe.py            # writes measurement.yaml (python probe.py --tiny: CPU smoke run)",
            f"Then: ftopt calibrate {self.out_dir}/measurement.yaml -o my-calibration.yaml && "
            f"ftopt solve {self.scenario} --calibration my-calibration.yaml",
        ]
        return out


def hf_model_config(arch: ModelArch) -> dict[str, Any]:
    """The architecture as HF config keys, with the family (llama, qwen2 for q/k/v bias, mixtral for MoE)."""
    family = "mixtral" if arch.experts > 1 else "qwen2" if arch.qkv_bias else "llama"
    out: dict[str, Any] = {"family": family, "hidden_size": arch.hidden, "intermediate_size": arch.intermediate,
                           "num_hidden_layers": arch.layers, "num_attention_heads": arch.heads,
                           "num_key_value_heads": arch.kv_heads, "vocab_size": arch.vocab,
                           "tie_word_embeddings": arch.tied_embeddings}  # fmt: skip
    if family == "mixtral":  # every block holds the experts at their own width (Qwen3-MoE has this shape too)
        if arch.shared_experts or arch.moe_layers < arch.layers:
            raise InputError(arch.source or arch.name, "model", "the probe builds Mixtral-style MoE models (routed "
                             "experts in every block); shared experts or dense blocks are not reproduced")  # fmt: skip
        out.update(intermediate_size=arch.expert_width, num_local_experts=arch.experts,
                   num_experts_per_tok=arch.experts_per_token)  # fmt: skip
    return out


LAYER_CLASS = {"llama": "LlamaDecoderLayer", "qwen2": "Qwen2DecoderLayer", "mixtral": "MixtralDecoderLayer"}


def trial_document(base: dict[str, Any], p: Plan, cards: int, tokens_steps: int, hourly: bool = True) -> dict[str, Any]:
    """The trial's scenario: the plan's per-GPU configuration on ``cards`` cards, gradient accumulation 1.

    Billed by the hour where the offer has an hourly price (``hourly``), else by its shortest term.
    """
    doc = {k: v for k, v in base.items() if k not in EXCLUDED}
    doc["name"] = f"probe-{base.get('name', 'scenario')}"[:MAX_NAME]
    doc["global_batch"] = p.micro_batch * cards
    doc["data"] = {"tokens": float(tokens_steps * p.micro_batch * cards * base["seq_len"]), "epochs": 1}
    doc["plan"] = {"gpu": p.gpu, "offer": p.offer, "cards": cards, "tp": 1, "zero_stage": p.zero_stage,
                   "offload": p.offload.value, "micro_batch": p.micro_batch, "checkpointing": p.checkpointing.value,
                   "precision": p.precision.value, "optimizer": p.optimizer.value}  # fmt: skip
    if hourly:
        doc["plan"]["term"] = "hour"
    ram = (base.get("allow") or {}).get("max_host_memory_gib")
    if ram is not None:  # the user's host RAM figure holds for the trial's node as for the plan's
        doc["allow"] = {"max_host_memory_gib": ram}
    return doc


def _estimate(doc: dict[str, Any], workdir: Path, ov: Overrides) -> Estimate:
    path = workdir / f"{safe_name(str(doc['name']))}-{doc['plan']['cards']}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return estimate_scenario(path, {}, Overrides(calibration=ov.calibration))


def choose_trial(base: dict[str, Any], p: Plan, per_node: int, n_steps: int, ov: Overrides,
                 hourly: bool = True, unit: int = 1) -> tuple[dict, Estimate]:  # fmt: skip
    """The smallest trial (see the module docstring, step 2) and its estimate.

    ``unit``: the offer's instance size when it rents whole instances only (the trial then takes one instance).
    """
    if p.zero_stage == 0:
        counts = [unit]
    else:
        counts = [d for d in (1, 2, 4, 8, 16, 32, 64)
                  if d <= min(p.dp, per_node) and p.dp % d == 0 and d % unit == 0] or [p.dp]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ftopt-probe-") as tmp:
        for d in counts:
            doc = trial_document(base, p, d, n_steps, hourly)
            est = _estimate(doc, Path(tmp), ov)
            if est.status.value == "feasible":  # fits its cards and its node's host RAM
                return doc, est
        doc = trial_document(base, p, p.dp, n_steps, hourly)
        return doc, _estimate(doc, Path(tmp), ov)


def time_error_worth(path: str | Path, est: Estimate, ov: Overrides, error: float = TIME_ERROR) -> float:
    """The plan's bill with ``error`` more compute time minus its bill (offer currency)."""
    sc, catalog, _ = prepare(path, ov)
    p, t = est.plan, est.time
    assert p is not None and t is not None
    offer = next(o for o in catalog.offers if o.id == p.offer)
    compute = t.steps * t.step_seconds / 3600.0
    hours = np.array([t.hours, t.hours + compute * error])
    low, high = cost.bills(hours, offer, sc.billing_terms)
    return round((high.per_card - low.per_card) * p.cards, 2)


def probe_attention(trial: Estimate, plan: Plan) -> Attention:
    """The kernel the trial runs: the one its GPU runs (``Plan.attention``: flash falls back to sdpa below sm80)."""
    kernel = trial.plan.attention if trial.plan is not None else None
    return kernel or plan.attention or Attention.sdpa


def probe_host_ram(cfg: dict[str, Any], arch: ModelArch, trial: Estimate, per_rank_gib: float,
                   kbit_base: float = 0.0) -> float:  # fmt: skip
    """Host RAM per node the probe run takes, bytes, as probe_script.build_model builds the model.

    Each rank: ``per_rank_gib`` (the process; calibration hosts.host_ram_per_rank_gib); plus the optimizer states
    ZeRO-Offload keeps on the host (the trial's memory.cpu_offload); plus, under FSDP without a 4-bit base, the one
    copy rank 0 builds on the host before FSDP shards it, in the launch's load dtype (fp32: hf_args.load_dtype). The
    weights are otherwise created on the GPUs: QLoRA quantised there matrix by matrix, ZeRO-3 partitioned. A 4-bit
    base that offloads its parameters is quantised whole by every rank and kept on the host (``kbit_base`` bytes
    each, :func:`kbit_base_bytes`) before the sharding engine takes it: one copy per rank.
    """
    mem = trial.memory
    offload = float(mem.cpu_offload) if mem is not None else 0.0
    ranks = int(cfg["cards"])
    host_copy = 0.0
    if cfg["sharding"] == "fsdp" and cfg["zero_stage"] > 0 and cfg["method"] != "qlora":
        host_copy = arch.total_params * (4.0 if cfg["method"] == "full" or cfg.get("load_dtype") == "float32" else 2.0)
    if cfg["method"] == "qlora" and cfg["offload"] == "all":
        host_copy = ranks * kbit_base
    return ranks * per_rank_gib * 2**30 + offload + host_copy


def kbit_base_bytes(sc: Scenario, arch: ModelArch, calibration: dict[str, Any]) -> float:
    """Bytes of the whole 4-bit base as probe_script.quantised_model builds it.

    The quantised Linears at the NF4 rate, every other parameter in 16 bits (models/memory.py quantized_params,
    calibration nf4_bytes_per_param).
    """
    nf4 = float(calibration["memory"]["nf4_bytes_per_param"])  # probe_script quantises to NF4 whatever base_bits says
    return float(memory.quantised_base_bytes(make_job(sc, arch, calibration), nf4, 2.0))


def _packages(cfg: dict[str, Any]) -> list[str]:
    out = ["torch", "transformers", "peft", "accelerate", "pyyaml"]
    if cfg["zero_stage"] > 0 and cfg["sharding"] == "deepspeed":
        out.append("deepspeed")
    if cfg["method"] == "qlora" or "8bit" in cfg["optimizer"]:
        out.append("bitsandbytes")
    if cfg["attention"] == "flash":
        out.append("flash-attn")
    return out


def probe_scenario(path: str | Path, out_dir: str | Path, steps: int = DEFAULT_STEPS, warmup: int = DEFAULT_WARMUP,
                   overrides: Overrides | None = None) -> Probe:  # fmt: skip
    """Solve, choose the trial, price it, and write ``probe.py`` and ``probe_config.json`` into ``out_dir``.

    An infeasible scenario raises :class:`NoPlanError` (exit 1, as solve) and writes nothing.
    """
    ov = overrides or Overrides()
    if steps < 1 or warmup < 0:
        raise InputError(str(path), "--steps" if steps < 1 else "--warmup", "steps must be >= 1 and warm-up >= 0")
    best = solve_scenario(path, ov, with_hint=False).best
    p = best.plan
    if p is None:
        raise NoPlanError(str(path), "no plan to probe: the scenario is infeasible (ftopt solve says why)")
    if p.tp > 1 or p.pp > 1:
        raise InputError(str(path), "plan.tp", f"the plan uses tp={p.tp}, pp={p.pp}; the probe runs data parallel "
                         "only: pin plan.tp: 1 to probe, or import your engine's own log into ftopt calibrate")
    sc, catalog, _ = prepare(path, ov)
    base = scenario_document(path)
    offer = next(o for o in catalog.offers if o.id == p.offer)
    doc, trial = choose_trial(base, p, offer.cards_per_node, steps + warmup, ov, "hour" in offer.prices,
                              offer.unit_cards)  # fmt: skip
    notes = []
    if sc.training.framework is not Framework.hf:
        doc["training"] = {**doc["training"], "framework": "hf",
                           "sharding": "fsdp" if sc.training.framework is Framework.torchtune else "deepspeed"}
        notes.append(f"the plan's engine is {sc.training.framework.value}; the probe runs HF Trainer, so it calibrates "
                     "the hf group (import your engine's log to calibrate its own)")  # fmt: skip
    if trial.plan is not None and trial.plan.cards < p.cards:
        notes.append(f"the trial shards over {trial.plan.cards} card(s) where the plan has {p.dp}: its per-GPU memory "
                     "differs, and the corrected model carries the measurement over to the plan")  # fmt: skip
    arch = ModelArch(**base["model"])
    training = doc["training"]
    lora = sc.lora_spec.model_dump(mode="json") if sc.lora_spec is not None else None
    if lora is not None:  # the names the built model has: an MoE model's experts are parameters (lora_names.py)
        lora["peft_targets"] = lora_config_targets(lora_names(sc, arch))
    model = hf_model_config(arch)
    cfg = {"id": f"probe-{sc.name}-{p.gpu}x{doc['plan']['cards']}".lower(), "scenario": doc, "model": model,
           "layer_class": LAYER_CLASS[model["family"]], "method": sc.method.value, "lora": lora,
           "seq_len": sc.seq_len, "micro_batch": p.micro_batch, "cards": doc["plan"]["cards"],
           "zero_stage": p.zero_stage, "offload": p.offload.value, "sharding": training.get("sharding", "deepspeed"),
           "checkpointing": p.checkpointing.value, "precision": p.precision.value, "optimizer": p.optimizer.value,
           "optimizer_kernel": training.get("optimizer_kernel", "fused"), "attention": probe_attention(trial, p).value,
           "warmup": warmup, "steps": steps}  # fmt: skip
    if cfg["sharding"] == "deepspeed" and p.zero_stage > 0 and trial.plan is not None:
        cfg["deepspeed"] = deepspeed_config(trial.plan)  # the launch's own config: SGD stays SGD under ZeRO-Offload
    if cfg["sharding"] == "fsdp" and p.zero_stage > 0 and trial.plan is not None:
        cfg["fsdp"] = fsdp_plugin(sc, trial.plan)  # the launch's own FSDP settings (use_orig_params false for LoRA)
    # the launch's own checkpointing mode (hf_args.use_reentrant: True for QLoRA under ZeRO-3 or FSDP, as PEFT's
    # scripts), so the memory the probe measures is the launched configuration's
    cfg["use_reentrant"] = use_reentrant(sc, trial.plan if trial.plan is not None else p)
    # the dtype the launch loads the model in (a bf16 checkpoint trains in fp32 master weights, as priced)
    # (as the probe runs it: HF Trainer, FSDP for a torchtune plan)
    probed = sc if sc.training.framework is Framework.hf else sc.model_copy(update={"training": sc.training.model_copy(
        update={"framework": Framework.hf, "sharding": Sharding(training["sharding"])})})  # fmt: skip
    cfg["load_dtype"] = load_dtype(probed, trial.plan if trial.plan is not None else p)
    cfg["packages"] = _packages(cfg)  # probe.py checks them before it imports any (one line, exit 2, when missing)
    out = Path(out_dir)
    write_folder_atomic(out, {"probe_config.json": json.dumps(cfg, indent=2, sort_keys=False) + "\n",
                              "probe.py": SCRIPT.read_text(encoding="utf-8")})  # fmt: skip
    worth = time_error_worth(path, best, ov)
    per_rank = float(catalog.calibration.get("hosts", {}).get("host_ram_per_rank_gib", 0.0))
    kbit = kbit_base_bytes(sc, arch, catalog.calibration) if sc.method is Method.qlora else 0.0
    host_ram = probe_host_ram(cfg, arch, trial, per_rank, kbit)
    if kbit and int(cfg["cards"]) > 1 and cfg["sharding"] == "fsdp":
        where = "on the host" if cfg["offload"] == "all" else "on its GPU"
        notes.append(f"probe.py quantises the whole 4-bit base on every rank, {kbit / 2**30:,.1f} GiB each kept "
                     f"{where}, before FSDP shards it (the launch loads it once, through rank 0): the trial needs "
                     "that much more than the plan while it starts")  # fmt: skip
    return Probe(str(path), best, trial, steps, warmup, str(out), worth, notes, cfg["packages"], host_ram)
