"""What each training engine can run, as data (calibration.yaml ``frameworks``), the one source of what is proposed.

Checkpointing levels, offloading, parallel degrees, methods, optimizers, optimizer-in-backward and activation
offloading.

Engines: hf_deepspeed and hf_fsdp (the hf framework with its ``training.sharding``), torchtune, nemo. The solver
proposes only configurations the scenario's engine can launch; a pinned value is used as given
(optimizer/solve/space.py ``grid``), except a pinned offload the engine cannot run, which is refused
(:func:`offload_refusal`). The sources of each entry are in calibration.yaml beside it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from optimizer.inputs.catalog import Catalog
from optimizer.inputs.schema import (
    Checkpointing,
    Framework,
    Loss,
    Method,
    ModelArch,
    Offload,
    OptimizerKernel,
    OptimizerName,
    Precision,
    Scenario,
    Sharding,
)
from optimizer.models.configs import Job


def engine_key(scenario: Scenario, job: Job) -> str:
    """hf_deepspeed | hf_fsdp for the hf framework (by ``training.sharding``), else the framework name."""
    return f"hf_{scenario.training.sharding.value}" if job.framework is Framework.hf else job.framework.value


def checkpointing_levels(job: Job, catalog: Catalog) -> list[str] | None:
    """Activation-checkpointing levels the framework offers (``frameworks.checkpointing``); None: every level."""
    return catalog.calibration.get("frameworks", {}).get("checkpointing", {}).get(job.framework.value)


def half_precision_fallback(job: Job, catalog: Catalog) -> Precision:
    """The precision proposed on a GPU without native bf16 (``frameworks.no_bf16_precision``; default fp16)."""
    value = catalog.calibration.get("frameworks", {}).get("no_bf16_precision", {}).get(job.framework.value, "fp16")
    return Precision(value)


def zero_stages(scenario: Scenario, job: Job, catalog: Catalog) -> tuple[int, ...] | None:
    """The ZeRO stages the scenario's engine has (``frameworks.zero_stages``); None: every stage.

    Under pipeline parallelism (a pinned pp > 1) an engine in ``frameworks.pp_zero_stages`` has only those. The
    solver proposes only these, and a pinned stage outside them is refused (space.configurations).
    """
    frameworks = catalog.calibration.get("frameworks", {})
    key = engine_key(scenario, job)
    stages = frameworks.get("zero_stages", {}).get(key)
    piped = frameworks.get("pp_zero_stages", {}).get(key)
    if (scenario.plan.pp or 1) > 1 and piped is not None:  # Megatron-FSDP or pipelining, not both
        return tuple(int(z) for z in (stages if stages is not None else range(4)) if int(z) in piped)
    return None if stages is None else tuple(int(z) for z in stages)


@dataclass(frozen=True)
class OffloadRule:
    """The offloading a scenario's engine can run.

    ``allowed``: whether at all (its optimizer must step on the CPU); ``pairs``: which (zero_stage, offload) pairs
    (None: every pair the grid has); ``min_dp``: the fewest data-parallel ranks it needs; ``pinnable``: whether a
    pinned offload can run with the scenario's optimizer, which ``pinned_optimizers`` lists (None: any).
    """

    allowed: bool = True
    pairs: frozenset[tuple[int, str]] | None = None
    min_dp: int = 1
    pinnable: bool = True
    pinned_optimizers: tuple[str, ...] | None = None

    def keeps(self, zero_stage: int, offload: Offload, dp: int) -> bool:
        """Whether the engine can run this offload (no offload is always kept)."""
        if offload is Offload.none:
            return True
        in_pairs = self.pairs is None or (zero_stage, offload.value) in self.pairs
        return self.allowed and in_pairs and dp >= self.min_dp


def offload_rule(scenario: Scenario, job: Job, catalog: Catalog) -> OffloadRule:
    """The engine's offload rule from calibration ``frameworks`` (keys hf_deepspeed | hf_fsdp | torchtune | nemo).

    ``offload_optimizers``: optimizers the solver offloads; ``pinned_offload_optimizers``: those a pinned offload
    may also step (default: the same); ``offload_modes``: the (zero_stage, offload) pairs
    and, for full fine-tuning, the fewest data-parallel ranks (``full_min_dp``). An engine missing from either
    allows everything. A pinned offload the rule does not allow is refused (:func:`offload_refusal`).
    """
    key = engine_key(scenario, job)
    frameworks = catalog.calibration.get("frameworks", {})
    optimizers = frameworks.get("offload_optimizers", {}).get(key)
    pinned = frameworks.get("pinned_offload_optimizers", {}).get(key, optimizers)
    optimizer = scenario.plan.optimizer or scenario.training.optimizer
    modes = frameworks.get("offload_modes", {}).get(key, {})
    pairs = modes.get("pairs")
    return OffloadRule(
        allowed=optimizers is None or optimizer.value in optimizers,
        pairs=None if pairs is None else frozenset((int(z), str(o)) for z, o in pairs),
        min_dp=int(modes.get("full_min_dp", 1)) if job.method is Method.full else 1,
        pinnable=pinned is None or optimizer.value in pinned,
        pinned_optimizers=None if pinned is None else tuple(str(o) for o in pinned),
    )


def offload_refusal(scenario: Scenario, rule: OffloadRule, engine: str,
                    stages: Iterable[tuple[int, Offload]]) -> tuple[str, str] | None:  # fmt: skip
    """(field, problem) when a pinned offload is one the engine cannot run, else None.

    Refused, in this order: an offload at a ZeRO stage that has none (``stages``, the grid's (zero_stage, offload)
    pairs: optimizer offload needs stage 1-3, parameter offload stage 3; at ZeRO-0 the memory model would keep the
    states on the GPU while the time model prices a CPU step); an optimizer the engine cannot step on the CPU
    (``rule.pinnable``: bitsandbytes' 8-bit optimizers need CUDA tensors); a (zero_stage, offload) pair outside the
    engine's (``rule.pairs``: FSDP offloads parameters, gradients and optimizer together, at full sharding); pinned
    cards leaving fewer data-parallel ranks than the offload needs (``rule.min_dp``: torchtune's full fine-tuning
    recipe applies FSDP, and with it ``fsdp_cpu_offload``, only on two or more ranks).
    """
    pins = scenario.plan
    off = pins.offload
    if off in (None, Offload.none):
        return None
    at = [z for z, o in stages if o is off]
    if pins.zero_stage is not None and pins.zero_stage not in at:
        return ("plan.offload", f"offload {off.value} runs at ZeRO stage {_or(at)}, and plan.zero_stage is "
                f"{pins.zero_stage}: allowed: offload none, or zero_stage {_or(at)}")  # fmt: skip
    if not rule.pinnable:
        optimizer = (pins.optimizer or scenario.training.optimizer).value
        return ("plan.offload", f"{engine} cannot step {optimizer} on the CPU: allowed: offload none, or optimizer "
                f"{_or(list(rule.pinned_optimizers or ()))}")  # fmt: skip
    if rule.pairs is not None:
        ok = sorted(z for z, o in rule.pairs if o == off.value)
        if not ok or (pins.zero_stage is not None and pins.zero_stage not in ok):
            runs = ", ".join(f"ZeRO-{z} offload {o}" for z, o in sorted(rule.pairs))
            return ("plan.offload", f"{engine} does not run offload {off.value}"
                    + (f" at ZeRO-{pins.zero_stage}" if pins.zero_stage is not None and ok else "")
                    + f": allowed: offload none, or {runs}")  # fmt: skip
    if pins.cards is None:
        return None
    dp = pins.cards // ((pins.tp or 1) * (pins.pp or 1))
    if dp >= rule.min_dp:
        return None
    return ("plan.offload", f"{engine} offloads (fsdp_cpu_offload) only on {rule.min_dp} or more data-parallel "
            f"ranks, and plan.cards {pins.cards} gives {dp}: allowed: offload none, or more cards")  # fmt: skip


def fused_loss_refusal(scenario: Scenario, arch: ModelArch, catalog: Catalog) -> tuple[str, str] | None:
    """(field, problem) when Liger's fused loss (hf ``training.loss: fused``) cannot run the scenario as priced.

    - A LoRA adapter on ``lm_head``: Liger's fused linear cross-entropy reads the output layer's ``weight`` (e.g.
      liger_kernel/transformers/model/llama.py ``lm_head_weight=lm_head.weight``), and PEFT's LoRA layer returns its
      frozen base weight there (peft tuners_utils.py ``weight``), so the adapter would be priced and never train.
    - A model type Liger does not patch (``frameworks.liger_model_types``): the libraries log and keep the full
      logits the plan's memory left out; an architecture without a model_type cannot be checked.
    """
    if scenario.training.framework is not Framework.hf or scenario.training.loss is not Loss.fused:
        return None
    spec = scenario.lora_spec
    if scenario.method is not Method.full and spec is not None and "lm_head" in [str(t) for t in spec.targets]:
        return ("lora.targets", "lm_head with training.loss fused: Liger's fused loss reads lm_head.weight directly, "
                "so an adapter there would never train; allowed: drop lm_head, or training.loss standard")  # fmt: skip
    types = catalog.calibration.get("frameworks", {}).get("liger_model_types")
    if types is None or arch.model_type in types:
        return None
    which = f"model_type {arch.model_type}" if arch.model_type else "no model_type (set model.model_type)"
    return ("training.loss", f"fused is Liger's fused loss, which patches {len(types)} model types "
            f"(calibration frameworks.liger_model_types); {arch.name} has {which}: allowed: standard")  # fmt: skip


def _or(items: list) -> str:
    """'1, 2 or 3' for [1, 2, 3]."""
    words = [str(x) for x in items]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _framework_table(catalog: Catalog, name: str) -> dict:
    return catalog.calibration.get("frameworks", {}).get(name, {}) or {}


@dataclass(frozen=True)
class Capabilities:
    """What the scenario's engine runs beyond offloading (calibration ``frameworks``); None: anything.

    ``tp``/``pp``: parallel degrees (``parallelism``); ``methods``/``optimizers``: what it trains with;
    ``in_backward``: methods it fuses the optimizer step into backward for (``optimizer_in_backward``);
    ``optimizer_kernels``: the AdamW implementations it can step with (``training.optimizer_kernel``);
    ``offload_needs_checkpointing``: activation offloading only with activation checkpointing.
    """

    engine: str
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    methods: tuple[str, ...] | None = None
    optimizers: tuple[str, ...] | None = None
    in_backward: tuple[str, ...] = ()
    offload_needs_checkpointing: bool = False
    hybrid_shard: bool = False  # shards inside each node and replicates across nodes (``hybrid_shard``)
    optimizer_kernels: tuple[str, ...] | None = None  # AdamW implementations it runs (``optimizer_kernels``)
    shardings: tuple[str, ...] | None = None  # training.sharding values its framework takes (``sharding``)
    precisions: tuple[str, ...] | None = None  # precisions it trains in (``precisions``)
    max_cards: int | None = None  # 1 when it steps the scenario's optimizer on one card only (``one_card_optimizers``)

    def allows_tp(self, tp: int) -> bool:
        """Whether the engine runs this tensor-parallel degree."""
        return self.tp is None or tp in self.tp

    def allows_pp(self, pp: int) -> bool:
        """Whether the engine runs this pipeline-parallel degree."""
        return self.pp is None or pp in self.pp


def capabilities(scenario: Scenario, catalog: Catalog) -> Capabilities:
    """The scenario's engine capabilities from calibration ``frameworks`` (keys as :func:`engine_key`)."""
    key = f"hf_{scenario.training.sharding.value}" if scenario.training.framework is Framework.hf else (
        scenario.training.framework.value)  # fmt: skip
    par = _framework_table(catalog, "parallelism").get(key, {})
    methods = _framework_table(catalog, "methods").get(key)
    optimizers = _framework_table(catalog, "optimizers").get(key)
    in_bwd = _framework_table(catalog, "optimizer_in_backward").get(key, [])
    kernels = _framework_table(catalog, "optimizer_kernels").get(key)
    shardings = _framework_table(catalog, "sharding").get(scenario.training.framework.value)
    precisions = _framework_table(catalog, "precisions").get(scenario.training.framework.value)
    needs = catalog.calibration.get("frameworks", {}).get("activation_offload_needs_checkpointing", [])
    optimizer = (scenario.plan.optimizer or scenario.training.optimizer).value
    one_card = optimizer in _framework_table(catalog, "one_card_optimizers").get(key, [])
    return Capabilities(
        engine=key,
        tp=tuple(par["tp"]) if "tp" in par else None,
        pp=tuple(par["pp"]) if "pp" in par else None,
        methods=tuple(methods) if methods is not None else None,
        optimizers=tuple(optimizers) if optimizers is not None else None,
        in_backward=tuple(in_bwd),
        offload_needs_checkpointing=key in needs,
        hybrid_shard=key in catalog.calibration.get("frameworks", {}).get("hybrid_shard", []),
        optimizer_kernels=tuple(kernels) if kernels is not None else None,
        shardings=tuple(shardings) if shardings is not None else None,
        precisions=tuple(precisions) if precisions is not None else None,
        max_cards=1 if one_card else None,
    )


def sharding_refusal(scenario: Scenario, cap: Capabilities) -> tuple[str, str] | None:
    """(field, problem) when ``training.sharding`` names a sharding the framework does not run, else None.

    A value the scenario sets is refused unless the framework takes it (calibration ``frameworks.sharding``), the
    default (deepspeed, left out of the file) included; left out, it passes everywhere: outside hf the default
    stands for "not set".
    """
    sharding = scenario.training.sharding
    explicit = "sharding" in scenario.training.model_fields_set
    if cap.shardings is None or not explicit or sharding.value in cap.shardings:
        return None
    name = scenario.training.framework.value
    takes = " | ".join(s for s in cap.shardings if s != Sharding.deepspeed.value)
    allowed = f"{takes}, or leave it out" if takes else "leave it out"
    return ("training.sharding", f"{sharding.value} is read by framework hf only (DeepSpeed or FSDP); {name} shards "
            f"by the plan's ZeRO stage and would ignore it; allowed: {allowed}")  # fmt: skip


def scenario_refusals(scenario: Scenario, cap: Capabilities) -> list[tuple[str, str]]:
    """(field, problem) for each scenario setting the engine cannot run, whatever the plan."""
    out: list[tuple[str, str]] = []
    name = scenario.training.framework.value
    if cap.methods is not None and scenario.method.value not in cap.methods:
        out.append(("method", f"{name} runs method {' | '.join(cap.methods)}, not {scenario.method.value}"))
    optimizer = scenario.plan.optimizer or scenario.training.optimizer
    if cap.optimizers is not None and optimizer.value not in cap.optimizers:
        out.append(("training.optimizer", f"{name} runs {' | '.join(cap.optimizers)}, not {optimizer.value}"))
    kernel = scenario.training.optimizer_kernel
    if kernel is not OptimizerKernel.fused and optimizer is not OptimizerName.adamw:
        out.append(("training.optimizer_kernel", f"{kernel.value} is torch AdamW's multi-tensor step, not "
                    f"{optimizer.value}'s; allowed: fused"))  # fmt: skip
    elif cap.optimizer_kernels is not None and kernel.value not in cap.optimizer_kernels:
        out.append(("training.optimizer_kernel", f"{name} steps AdamW {' | '.join(cap.optimizer_kernels)}, "
                    f"not {kernel.value}"))  # fmt: skip
    refused = sharding_refusal(scenario, cap)
    if refused is not None:
        out.append(refused)
    precision = scenario.plan.precision
    if precision is not None and cap.precisions is not None and precision.value not in cap.precisions:
        out.append(("plan.precision", f"{name} trains in {' | '.join(cap.precisions)}, not "
                    f"{precision.value} (calibration frameworks.precisions)"))  # fmt: skip
    cards = scenario.plan.cards
    if cap.max_cards is not None and cards is not None and cards > cap.max_cards:
        out.append(("plan.cards", f"{name} steps {optimizer.value} on one card only, its single-device recipes "
                    "(calibration frameworks.one_card_optimizers): allowed: cards 1, or another training.optimizer "
                    "(adamw, sgd, adafactor)"))  # fmt: skip
    if scenario.training.optimizer_in_backward and scenario.method.value not in cap.in_backward:
        runs = ", ".join(cap.in_backward) or "no method"
        out.append(("training.optimizer_in_backward", f"{cap.engine} runs the optimizer in backward for {runs}; "
                    "allowed: false"))  # fmt: skip
    return out


def plan_refusals(scenario: Scenario, cap: Capabilities, tp: int, pp: int, grad_accum: int | None,
                  checkpointing: Checkpointing | None) -> list[tuple[str, str]]:  # fmt: skip
    """(field, problem) for each plan value (pinned or proposed) the engine cannot run; None: not decided yet."""
    out: list[tuple[str, str]] = []
    if not cap.allows_tp(tp):
        out.append(("plan.tp", f"{cap.engine} runs tp {' | '.join(map(str, cap.tp or ()))}, not {tp}"))
    if not cap.allows_pp(pp):
        out.append(("plan.pp", f"{cap.engine} runs pp {' | '.join(map(str, cap.pp or ()))}, not {pp}"))
    if scenario.training.optimizer_in_backward and grad_accum is not None and grad_accum != 1:
        out.append(("plan.grad_accum", f"optimizer_in_backward needs grad_accum 1, not {grad_accum}"))
    offload = scenario.training.activation_offload and cap.offload_needs_checkpointing
    if offload and checkpointing is Checkpointing.none:
        out.append(("plan.checkpointing", f"{cap.engine} offloads activations only with checkpointing: "
                    "allowed: selective | full"))  # fmt: skip
    return out
