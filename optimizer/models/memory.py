"""Per-GPU peak training memory, one pure function per component.

Every function takes a :class:`~optimizer.models.configs.Job` (scalars), a :class:`~optimizer.models.configs.Configs`
(arrays of
shape ``(n,)``) and the ``memory`` section of ``catalogs/calibration.yaml``, and returns int64 bytes of shape
``(n,)``. Notation (docs/formulas.md, Part I): P parameters, L layers, h hidden, I SwiGLU width,
a heads, h_kv = kv_heads x head_dim, V vocab, s sequence length, b micro-batch, T = s b tokens per micro-batch,
t tensor-parallel degree, p pipeline degree, N = dp sharding degree.

Engines. Each row is trained by one engine, which decides the bytes per parameter (``memory.profiles``):
ZeRO stage 0 runs the framework's plain profile (``hf``: HF Trainer AMP; ``torchtune``: pure bf16; ``nemo``:
Megatron); stage >= 1 under ``hf`` runs ``hf_deepspeed`` or ``hf_fsdp`` (``training.sharding``); torchtune shards
with FSDP2 and nemo with Megatron's distributed optimizer, both in their own profile.

Peak. The components are the bytes live at the peak of one training step, so that
total = weights + gradients + optimizer + activations + logits + overhead. Gradients that are freed every step
(gradient accumulation 1, no persistent gradient buffer) are allocated while the activations are released, so the
peak is W + O + max(A + LOG + G_out, G) (formulas.md section 1 "Rules the solver needs"; G_out, the trained output
layer's gradient, is produced first, while everything else is still live); ``gradients`` then reports the part
of that maximum above A + LOG. Activations A and logits LOG are computed in :mod:`optimizer.models.activations`.
``overhead`` holds the CUDA context (``context``, outside torch's counters), communication buffers, ZeRO-3/FSDP
gathered parameters, k-bit dequantisation and allocator fragmentation (``fragmentation``, reserved minus
allocated); :func:`peak_for_metric` maps the total to what a counter reports.

Sources: ZeRO (Rajbhandari et al. 2019, arXiv 1910.02054, section 3) for model states; DeepSpeed's
``estimate_zero2/zero3_model_states_mem_needs`` for its exact per-stage bytes; Dettmers et al. 2023 (QLoRA,
arXiv 2305.14314) for NF4 with double quantisation; HF and torchtune sources for dtype defaults (formulas.md
section 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from optimizer.inputs.schema import Framework, Method, Offload, OptimizerName, Precision, Sharding
from optimizer.models.activations import _f, _i64, _targets, activation_bytes, logits_bytes, quant_kernel
from optimizer.models.configs import OFFLOAD, OPTIMIZER, PRECISION, Configs, Job

GIB = 2**30
_NONE, _ALL = OFFLOAD.index(Offload.none), OFFLOAD.index(Offload.all)
_FP32 = PRECISION.index(Precision.fp32)
_ADAMW = OPTIMIZER.index(OptimizerName.adamw)

COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead")
METRICS = ("allocated", "reserved", "nvidia-smi")


# ------------------------------------------------------------------------------------------------ engines


def _sharded_profile_name(job: Job) -> str:
    """Profile used at ZeRO stage >= 1: hf -> hf_<sharding>; torchtune (FSDP2) and nemo keep their own."""
    return f"hf_{job.sharding.value}" if job.framework is Framework.hf else job.framework.value


def _uses_deepspeed(job: Job, cfg: Configs) -> np.ndarray:
    """Rows run by DeepSpeed ZeRO (hf framework, sharding deepspeed, stage >= 1), bool (n,)."""
    return (cfg.zero_stage >= 1) & (job.framework is Framework.hf and job.sharding is Sharding.deepspeed)


def _uses_fsdp(job: Job, cfg: Configs) -> np.ndarray:
    """Rows sharded by PyTorch FSDP (hf with sharding fsdp, or torchtune, at stage >= 1), bool (n,)."""
    fsdp = (job.framework is Framework.hf and job.sharding is Sharding.fsdp) or job.framework is Framework.torchtune
    return (cfg.zero_stage >= 1) & fsdp


def _field(job: Job, cfg: Configs, consts: Mapping[str, Any], name: str) -> np.ndarray:
    """A profile value per row: the framework's plain profile at stage 0, its sharded profile at stage >= 1."""
    profiles = consts["profiles"]
    plain = float(profiles[job.framework.value][name])
    sharded = float(profiles[_sharded_profile_name(job)][name])
    return np.where(cfg.zero_stage >= 1, sharded, plain)


def _state_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Bytes per trainable parameter (float (n,) each): weight, grad16, grad32, master, moments.

    Full fine-tuning uses the profile's ``weight/grad/grad_partition/master`` bytes, LoRA the ``adapter_*`` ones.
    fp32 rows: 4 B weights, 4 B grads, no master. Moments per optimizer (formulas.md section 1): AdamW m and v
    at the profile's ``adam_moment_bytes`` (8 fp32, 4 bf16); 8-bit AdamW 2 (bitsandbytes, 1 B each); SGD with
    momentum half of AdamW; Adafactor 0 (factored second moment, O(rows + cols), neglected).
    """
    pre = "" if job.method is Method.full else "adapter_"
    fp32 = cfg.precision == _FP32
    adam = np.where(fp32, 8.0, _field(job, cfg, consts, "adam_moment_bytes"))
    moments_by_code = np.stack(
        [
            {
                OptimizerName.adamw: adam,
                OptimizerName.adamw_8bit: np.full(len(cfg), 2.0),
                OptimizerName.paged_adamw_8bit: np.full(len(cfg), 2.0),
                OptimizerName.sgd: adam / 2,
                OptimizerName.adafactor: np.zeros(len(cfg)),
            }[o]
            for o in OPTIMIZER
        ]
    )
    moments = moments_by_code[cfg.optimizer, np.arange(len(cfg))]
    return {
        "weight": np.where(fp32, 4.0, _field(job, cfg, consts, pre + "weight_bytes")),
        "grad16": np.where(fp32, 4.0, _field(job, cfg, consts, pre + "grad_bytes")),
        "grad32": np.where(fp32, 0.0, _field(job, cfg, consts, pre + "grad_partition_bytes")),
        "master": np.where(fp32, 0.0, _field(job, cfg, consts, pre + "master_bytes")),
        "moments": moments,
    }


# ------------------------------------------------------------------------------------------------ parameter counts


def lora_params(job: Job) -> int:
    """Trainable adapter parameters: sum over adapted Linear(d_in -> d_out) of r (d_in + d_out), times L.

    Per layer r [(h+h)_q + (h+h_kv)_k + (h+h_kv)_v + (h+h)_o + (h+I)_gate + (h+I)_up + (I+h)_down] for the targets
    chosen; ``lm_head`` adds r (h + V) once. MoE counts every MLP at its own width (each routed and shared expert,
    and the dense blocks' MLPs), except that a routed expert's gate and up are one fused weight h -> 2w, adapted
    whole when either is a target: r (h + 2w) for the pair, r (w + h) for down. Fused in transformers 5
    (MixtralExperts / Qwen2MoeExperts / Qwen3MoeExperts ``gate_up_proj``, which PEFT's ``target_parameters`` adapts
    with A of r x h and B of 2w x r per expert: catalogs/lora_targets.yaml, measured with peft 0.21.2) and in
    Megatron-Core (an expert's ``linear_fc1``). Source: Hu et al. 2021 (LoRA, arXiv 2106.09685) section 4; checked
    in formulas.md section 5 (Llama-3.1-8B r16 all-linear = 41.94M).
    """
    if job.lora is None:
        return 0
    a = job.arch
    h, kv, r, hq = a.hidden, a.kv_width, job.lora.rank, a.q_width
    routed, w = a.moe_layers * a.experts, a.expert_width  # routed experts over all blocks (0 for a dense model)
    mlps = sum(n for n, _ in a.mlp_widths)  # every SwiGLU MLP over all blocks (each expert is one)
    mlp = mlps * h + a.mlp_width_sum  # sum over the MLPs of (h + w): one of gate, up or down each
    linear = mlp - routed * (h + w)  # the same over the Linear MLPs only (dense blocks, shared experts)
    all_layers = {
        "q_proj": (h + hq) * a.layers,  # h_q = a d = h unless the config gives head_dim (Gemma-2)
        "k_proj": (h + kv) * a.layers,
        "v_proj": (h + kv) * a.layers,
        "o_proj": (hq + h) * a.layers,
        "gate_proj": linear,
        "up_proj": linear,
        "down_proj": mlp,
    }
    targets = _targets(job)
    gate_up = routed * (h + 2 * w) if targets & {"gate_proj", "up_proj"} else 0  # the experts' fused weight
    head = (h + a.vocab) if "lm_head" in targets else 0
    return r * (sum(w for name, w in all_layers.items() if name in targets) + gate_up + head)


def linear_params(job: Job) -> int:
    """Parameters in the blocks' Linear layers (what a 4/8-bit base quantises): L (2h h_q + 2h h_kv) + 3h sum(w).

    sum(w) is the branch widths of every MLP over all blocks (L I dense; each expert at its width for MoE).
    """
    a = job.arch
    return a.layers * (2 * a.hidden * a.q_width + 2 * a.hidden * a.kv_width) + 3 * a.hidden * a.mlp_width_sum


def quantized_params(job: Job) -> int:
    """Parameters a 4/8-bit base stores quantised: :func:`linear_params` less the routed experts'.

    bitsandbytes quantises nn.Linear modules only, and transformers 5 holds an MoE block's routed experts as fused
    3-D parameters (``mlp.experts.gate_up_proj``, ``down_proj``; catalogs/lora_targets.yaml), so they load in the
    16-bit dtype beside a quantised attention (checked: MixtralForCausalLM, transformers 5.24.0 + bitsandbytes
    0.50.2, ``load_in_4bit``: attention Params4bit, experts bfloat16); PEFT's prepare_model_for_kbit_training then
    casts them with the other unquantised parameters. Shared experts and dense blocks stay Linears.
    """
    a = job.arch
    return linear_params(job) - 3 * a.hidden * a.moe_layers * a.experts * a.expert_width


def trainable_params(job: Job) -> int:
    """Parameters that carry gradients and optimizer state: all (full) or the adapters (LoRA/QLoRA)."""
    return job.arch.total_params if job.method is Method.full else lora_params(job)


def largest_module_params(job: Job) -> int:
    """Parameters of the largest single module, DeepSpeed's ``largest_layer_params``: max(V h, h I, h^2).

    The input embedding (and an untied lm_head) is V h; the largest block Linear is an MLP projection h x I.
    Source: DeepSpeed docs, memory.rst (model_to_params sums ``m.parameters(recurse=False)`` per module).
    """
    a = job.arch
    return max(a.vocab * a.hidden, a.hidden * a.widest_mlp, a.hidden * a.hidden)


def _model_split(cfg: Configs) -> np.ndarray:
    """Model-parallel split t x p of every weight matrix (float array)."""
    return (cfg.tp * cfg.pp).astype(np.float64)


# ------------------------------------------------------------------------------------------------ model states


def weight_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Resident weights per GPU (bytes, (n,)), LoRA adapter weights included.

    full: P x w / (t p), w from the engine profile (HF AMP: 4 fp32 + 2 autocast copy = 6, HF model_memory_anatomy;
    DeepSpeed, torchtune, Megatron: 2; HF FSDP: 4 fp32 sharded), divided by N at ZeRO-3, 0 when parameters are
    offloaded (stage 3, ``all``). LoRA: frozen base P x ``frozen_base_bytes`` (2; 4 under HF FSDP, whose flat
    parameters keep the fp32 load dtype of PEFT's examples/sft/utils.py). QLoRA: P_lin x kbit + (P - P_lin) x
    nonlin, kbit 1 (8-bit) or the NF4 rate 0.5 + 0.5/64 x (8/32 + 32/(32 x 256)) ~ 0.516 B/param (QLoRA paper,
    double quantisation; P_lin as :func:`quantized_params`: MoE routed experts stay 16-bit), nonlin the profile's
    ``kbit_nonlinear_bytes`` (PEFT prepare_model_for_kbit_training
    casts them to fp32: 4; torchtune, DeepSpeed and FSDP keep 2). Plus adapters x the profile's
    ``adapter_weight_bytes`` (PEFT fp32 adapters: 4). Same division by t p and N.
    """
    split = _model_split(cfg)
    z3 = cfg.zero_stage >= 3
    shard = np.where(z3, cfg.shard_ranks, 1).astype(np.float64)
    per_param = _state_bytes(job, cfg, consts)["weight"]
    trained = trainable_params(job) * per_param
    if job.method is Method.full:
        base = np.zeros(len(cfg))
    else:
        base16 = _field(job, cfg, consts, "frozen_base_bytes")
        if job.base_bits == 16:
            base = job.arch.total_params * base16
        else:
            base = quantised_base_bytes(job, kbit_rate(job, consts), _field(job, cfg, consts, "kbit_nonlinear_bytes"))
    state = replicated_quant_state_bytes(job, cfg, consts)  # whole on every rank: out of the sharded share
    resident = (base - state + trained) / split / shard
    return _i64(np.where(z3 & (cfg.offload == _ALL), 0.0, resident) + state / split)


def replicated_quant_state_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """A 4-bit base's quantisation statistics kept whole on every GPU under FSDP, bytes before the t p split, (n,).

    0 for every other row.

    bitsandbytes keeps each ``Params4bit``'s ``quant_state`` (the absmax of every 64 weights, 8-bit under double
    quantisation, and its second-level fp32 scales) as an attribute of the parameter, outside its data. FSDP
    flattens, shards and CPU-offloads only parameters and buffers (Answer.AI's fsdp_qlora train.py@50efa1e
    ``load_and_quantize``: "FSDP only syncs parameters and buffers, so the quant_state isn't copied", so every rank
    quantises to build its own), so each rank holds the whole state on its GPU: P_lin x (NF4 rate - 0.5) =
    P_lin x 0.0159 B, about 1.1 GB for a 70B model, under ZeRO-3 (FSDP full sharding) with or without offload.
    Kernels: calibration ``kbit_replicated_state_kernels`` (bitsandbytes; torchao's NF4Tensor shards its scalers
    with the weight under FSDP2); engines that shard with FSDP (hf_fsdp).
    """
    if job.base_bits != 4 or quant_kernel(job, consts) not in consts.get("kbit_replicated_state_kernels", ()):
        return np.zeros(len(cfg))
    state = float(quantized_params(job)) * (float(consts["nf4_bytes_per_param"]) - 0.5)
    return np.where(_uses_fsdp(job, cfg) & (cfg.zero_stage >= 3), state, 0.0)


def kbit_load_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Per-GPU bytes while a 4/8-bit base loads under DeepSpeed ZeRO-3, 0 for every other row, int64 (n,).

    transformers builds a quantised model outside ``deepspeed.zero.Init`` (modeling_utils.py: ``needs_zero3_init =
    is_deepspeed_zero3_enabled() and not _is_quantized``), and the bitsandbytes quantizer places it whole on each
    rank's GPU (quantizers/quantizer_bnb_4bit.py: ``device_map = {"": torch.cuda.current_device()}``); DeepSpeed
    partitions it only when its engine starts (deepspeedai/DeepSpeed issue 5660: "parameters first be fully loaded to
    each GPU and then be sharded" with bitsandbytes, not without). So before training every GPU holds the whole base:
    P_lin x kbit + (P - P_lin) x ``kbit_nonlinear_bytes``, as :func:`weight_bytes` prices it unsharded, plus the CUDA
    context. PEFT's DeepSpeed guide runs ZeRO-3 QLoRA of a 70B model on 80 GB cards; FSDP's
    ``cpu_ram_efficient_loading`` is what fits it on 24 GB ones.
    """
    if job.base_bits == 16:
        return np.zeros(len(cfg), dtype=np.int64)
    base = quantised_base_bytes(job, kbit_rate(job, consts), _field(job, cfg, consts, "kbit_nonlinear_bytes"))
    loads_whole = _uses_deepspeed(job, cfg) & (cfg.zero_stage >= 3)
    return _i64(np.where(loads_whole, base + float(consts["context_bytes"]), 0.0))


def kbit_rate(job: Job, consts: Mapping[str, Any]) -> float:
    """Bytes per quantised parameter of the job's 4/8-bit base: 1 (8-bit), or the NF4 rate ``nf4_bytes_per_param``."""
    return {8: 1.0, 4: float(consts["nf4_bytes_per_param"])}[job.base_bits]


def quantised_base_bytes(job: Job, kbit: float, nonlinear: float | np.ndarray) -> float | np.ndarray:
    """A whole 4/8-bit base, unsharded: P_lin x ``kbit`` + (P - P_lin) x ``nonlinear`` bytes.

    P_lin the quantised Linears (:func:`quantized_params`); every other parameter (embeddings, norms, the output
    layer, an MoE's routed experts) at ``nonlinear`` bytes, a float or one per row.
    """
    p_lin = float(quantized_params(job))
    return p_lin * kbit + (job.arch.total_params - p_lin) * nonlinear


def holds_unsharded_gradients(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """FSDP rows that accumulate unsharded gradients across micro-batches, bool (n,).

    A trainer that skips gradient reduction on all but the last micro-batch of a step (FSDP1 ``no_sync()``, FSDP2
    ``set_requires_gradient_sync(False)``) keeps every parameter's full gradient until that last reduce-scatter:
    transformers' Trainer does so under FSDP (``_inner_training_loop``: ``accelerator.no_sync`` for every micro-batch
    but the last unless DeepSpeed or accelerate's ``sync_each_batch``), and so does KempnerForge (scripts/train.py
    ``maybe_no_sync``). Rows: FSDP (:func:`_uses_fsdp`) at stage >= 2, no pipeline (handled by
    :func:`zero3_gathered_bytes`), gradient accumulation > 1, and ``training.reduce_every_micro_batch`` false, or
    unset with the engine in calibration ``fsdp_unsharded_accumulation``.
    """
    if job.reduce_every_micro_batch is None:
        holds = _sharded_profile_name(job) in consts.get("fsdp_unsharded_accumulation", [])
    else:
        holds = not job.reduce_every_micro_batch
    rows = _uses_fsdp(job, cfg) & (cfg.zero_stage >= 2) & (cfg.pp <= 1) & (cfg.grad_accum > 1)
    return rows & holds


def gradient_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """All gradients held per GPU after backward (bytes, (n,)), before the peak-phase rule of :func:`breakdown`.

    P_train x (g16 x f16 + g32 / N_1) / (t p). g16 = 16-bit (or the profile's) gradients: unsharded at stage
    <= 1, / N at stage 2, at stage 3 / N (FSDP, torchtune) or 0 (DeepSpeed reduces them through buckets).
    g32 = DeepSpeed's fp32 gradient partitions (4 B), / N from stage 1. DeepSpeed estimator
    (stage_1_and_2.py, stage3.py): ZeRO-2 = 2P + 18P/N with 18 = 2 + 4 (grads) + 12 (optimizer); ZeRO-3 =
    18P/N + 4 P_ll with 18 = 2 (params) + 4 (fp32 grads) + 12. With offload (stage >= 1) the fp32 partitions
    and, from stage 2, the 16-bit gradients live on the CPU: ZeRO-2 offload = 2P, ZeRO-3 offload = 4 P_ll + 2P/N.
    FSDP accumulating without a reduce per micro-batch (:func:`holds_unsharded_gradients`) holds them unsharded, on
    the GPU even under ``offload: all`` (only the reduced shards move to the host), at 4 B each under
    ``training.reduce_dtype: fp32`` (FSDP2 accumulates in its MixedPrecisionPolicy reduce dtype when it differs from
    the parameters': torch/distributed/fsdp/_fully_shard/_fsdp_param.py ``to_accumulated_grad_if_needed``;
    KempnerForge's policy is bf16 parameters, fp32 reduce).
    Optimizer in backward (``training.optimizer_in_backward``, torchtune optimizer_in_bwd; gradient accumulation
    1 only): each parameter is stepped and its gradient freed as soon as it is produced, so at most the largest
    module's gradients, min(P_train, P_ll) x g16 / (t p), are held (formulas.md section 8, "G ~ 0").
    """
    split = _model_split(cfg)
    n = cfg.shard_ranks.astype(np.float64)
    b = _state_bytes(job, cfg, consts)
    ds = _uses_deepspeed(job, cfg)
    f16 = np.select([cfg.zero_stage <= 1, cfg.zero_stage == 2, ds], [1.0, 1.0 / n, 0.0], 1.0 / n)
    f32 = np.where(cfg.zero_stage >= 1, 1.0 / n, 1.0)
    offloaded = (cfg.offload != _NONE) & (cfg.zero_stage >= 1)
    f16 = np.where(offloaded & (cfg.zero_stage >= 2), 0.0, f16)
    held = holds_unsharded_gradients(job, cfg, consts)
    f16 = np.where(held, 1.0, f16)
    f32 = np.where(offloaded, 0.0, f32)
    # FSDP2 keeps the gradients it accumulates unsharded in its reduce dtype (FSDPParam.to_accumulated_grad_if_needed)
    g16 = np.where(held & (job.reduce_dtype == "fp32"), 4.0, b["grad16"])
    grads = trainable_params(job) * (g16 * f16 + b["grad32"] * f32) / split
    if job.optimizer_in_backward:
        # one module's gradients live at a time (formulas.md section 8: G ~ 0 with optimizer-in-backward)
        one = min(trainable_params(job), largest_module_params(job)) * b["grad16"] / split
        grads = np.where(cfg.grad_accum <= 1, np.minimum(grads, one), grads)
    # offload all keeps the sharded gradients on the host, but not the unsharded ones a no_sync accumulation holds on
    # the GPU until its last micro-batch (torch FSDP1 accumulates inside no_sync on the device with CPU offload)
    on_host = (cfg.zero_stage >= 3) & (cfg.offload == _ALL) & ~holds_unsharded_gradients(job, cfg, consts)
    return _i64(np.where(on_host, 0.0, grads))


def optimizer_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Optimizer states on the GPU (bytes, (n,)): P_train x (master + moments) / (t p), / N from ZeRO-1 on.

    master = fp32 copy kept by DeepSpeed and Megatron (4 B; ZeRO paper K = 12 = 4 + 8), none for HF AMP (the
    weights are fp32 already) and torchtune (pure bf16). 0 on the GPU when offloaded (stage >= 1). Paged 8-bit
    optimizers live in CUDA unified memory that torch's counters do not see (formulas.md section 1); they are
    still counted because they occupy the card until the driver pages them out.
    """
    split = _model_split(cfg)
    shard = np.where(cfg.zero_stage >= 1, cfg.shard_ranks, 1).astype(np.float64)
    b = _state_bytes(job, cfg, consts)
    states = trainable_params(job) * (b["master"] + b["moments"]) / split / shard
    return _i64(np.where((cfg.offload != _NONE) & (cfg.zero_stage >= 1), 0.0, states))


def foreach_step_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """The foreach AdamW step's temporary (bytes, (n,)): P_local x v's bytes, 0 for a fused step.

    torch's multi-tensor AdamW (``training.optimizer_kernel: foreach``) computes the denominator out of place,
    ``exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)`` (torch/optim/adam.py ``_multi_tensor_adam``), a copy of the
    second moment for every parameter of the group, alive until the update (torch's optimizer docs: the foreach path
    uses about sizeof(params) more peak memory). v is half the AdamW moment bytes; P_local as in
    :func:`optimizer_bytes`. 0 for other optimizers and when the step runs on the CPU.
    """
    if job.optimizer_kernel == "fused":
        return np.zeros(len(cfg), dtype=np.int64)
    split = _model_split(cfg)
    shard = np.where(cfg.zero_stage >= 1, cfg.shard_ranks, 1).astype(np.float64)
    v = _state_bytes(job, cfg, consts)["moments"] / 2.0
    on_gpu = (cfg.optimizer == _ADAMW) & ~((cfg.offload != _NONE) & (cfg.zero_stage >= 1))
    return _i64(np.where(on_gpu, trainable_params(job) * v / split / shard, 0.0))


# ------------------------------------------------------------------------------------------------ overheads


def zero3_gathered_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Parameters gathered (unsharded) at ZeRO-3 / FSDP full sharding, with their gradients (bytes, (n,)).

    DeepSpeed: 4 x P_ll / t, the 16-bit parameters and gradients of the largest module (its estimator's
    ``largest_layer_memory``; P_ll from :func:`largest_module_params`). FSDP (hf_fsdp, torchtune FSDP2):
    (u x w + g) x max(P_layer, V h) / t with u = ``fsdp_live_units`` parameter units in flight (the one computing
    and the one prefetched; PyTorch FSDP backward_prefetch), w = 2 B (16-bit) or the NF4 rate for a 4-bit base
    stored as bf16 words, and g = 2 B for one unit's unsharded gradients before reduce-scatter (full fine-tuning
    only: a frozen base has none). 0 below stage 3.
    Engines in ``fsdp_unsharded_root_engines`` (hf_fsdp) wrap only the decoder layers, so the root unit holds the
    embeddings, the output head and the final norm, and FSDP keeps the root unsharded from its forward to its
    backward (FSDP1 ``_post_forward_reshard``: "Do not free the root's parameters in the post-forward"; FSDP2
    ``_lazy_init`` sets the root's ``post_forward_mesh_info = None``): u x w x P_layer + 2 B x (embeddings + h) + g x
    max(P_layer, V h). The root is 16-bit even for a 4-bit base (embeddings and head are never quantised).
    torchtune shards ``tok_embeddings`` and ``output`` as units of their own (``custom_sharded_layers``), so its root
    holds only the norm and the largest unit is max(P_layer, V h).
    FSDP with pipeline parallelism (p > 1) keeps the whole stage unsharded: torchtitan shards each block with
    ``reshard_after_forward=False`` under PP ("do not reshard after forward to avoid per-microbatch all-gathers",
    pytorch/torchtitan torchtitan/parallelisms/parallelize_llama.py apply_fsdp@9dec370), and the pipeline schedule
    turns gradient reduction off for all but the last micro-batch (torch.distributed.pipelining PipelineStage
    ``set_requires_gradient_sync``), so FSDP2 accumulates unsharded gradients in the reduce dtype
    (FSDPParam.to_accumulated_grad_if_needed). The stage's P / (t p) parameters then hold w (16-bit) + the profile's
    gradient bytes (full fine-tuning): (w + g16) x P / (t p), or the unit term when that is larger.
    """
    a = job.arch
    ds = 4.0 * largest_module_params(job)
    w = float(consts["nf4_bytes_per_param"]) if job.base_bits == 4 else 2.0
    grad_unit = 2.0 if job.method is Method.full else 0.0  # a frozen base has no gradients to reduce-scatter
    largest = max(a.layer_params, a.vocab * a.hidden)
    root_kept = _sharded_profile_name(job) in consts.get("fsdp_unsharded_root_engines", ())
    root = 2.0 * (a.embedding_params + a.hidden) if root_kept else 0.0  # 16-bit embeddings, head, final norm
    unit = a.layer_params if root_kept else largest
    fsdp = float(consts["fsdp_live_units"]) * w * unit + root + grad_unit * largest
    g16 = _state_bytes(job, cfg, consts)["grad16"] if job.method is Method.full else np.zeros(len(cfg))
    stage = (w + g16) * a.total_params / _f(cfg.pp)  # a whole pipeline stage, unsharded, with accumulated grads
    fsdp = np.where((cfg.pp > 1) & _uses_fsdp(job, cfg), np.maximum(fsdp, stage), fsdp)
    gathered = np.where(_uses_deepspeed(job, cfg), ds, fsdp) / _f(cfg.tp)
    return _i64(np.where(cfg.zero_stage >= 3, gathered, 0.0))


def fsdp_gradient_pool_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Reserve that FSDP's sharded gradients keep in their own stream's pool (bytes, (n,)), in ``fragmentation``.

    Counted in ``fragmentation`` (reserved minus allocated). FSDP allocates each reduce-scatter output, of which
    the sharded gradients are views, on its reduce-scatter stream (FSDP2 foreach_reduce: ``with
    device_handle.stream(reduce_scatter_stream): reduce_output = reduce_scatter_input.new_empty(...)``,
    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py; FSDP1 on its post-backward stream), and the caching
    allocator reuses a freed block only for the stream it was allocated on (torch docs, Tensor.record_stream).
    Gradients freed by ``zero_grad(set_to_none=True)`` therefore stay reserved in that pool while the default
    stream's activations reach their peak: the reserve holds A + LOG + G_out and G at once, while allocated holds
    only max(A + LOG + G_out, G) (:func:`breakdown`). The difference, min(G, A + LOG + G_out), is this term, for
    FSDP rows whose gradients are transient (gradient accumulation 1) at stage >= 2 (sharded by reduce-scatter);
    0 otherwise. Evidence: torchtitan's Llama-3.1-8B reserved peak drops 15.4 GiB from 8 to 128 GPUs, 17.6 B per
    parameter x (1/8 - 1/128), more than the 12 B of fp32 weights and AdamW states that allocated memory shards.
    """
    in_flight = activation_bytes(job, cfg, consts) + logits_bytes(job, cfg, consts)
    in_flight = in_flight + output_gradient_bytes(job, cfg, consts)
    return _gradient_pool(job, cfg, gradient_bytes(job, cfg, consts), in_flight)


def _gradient_pool(job: Job, cfg: Configs, grads: np.ndarray, in_flight: np.ndarray) -> np.ndarray:
    """min(G, A + LOG + G_out) on FSDP rows with transient sharded gradients, else 0 (int64 (n,))."""
    rows = _uses_fsdp(job, cfg) & (cfg.zero_stage >= 2) & (cfg.grad_accum <= 1)
    return _i64(np.where(rows, np.minimum(grads, in_flight), 0.0))


def buffer_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Communication buckets and k-bit dequantisation transients, inside torch's allocator (bytes, (n,)).

    DDP (stage 0, dp > 1): ``ddp_bucket_bytes`` (torch DDP bucket_cap_mb 25, a few buckets in flight).
    DeepSpeed ZeRO-1/2 (also on one GPU): ``ds_bucket_bytes`` (reduce and all-gather buckets, HF "auto" sizes).
    DeepSpeed ZeRO-3: 2 B x min(stage3_max_live_parameters, P / t) 16-bit parameters kept gathered for reuse
    (DeepSpeed runtime/zero/config.py default 1e9; EleutherAI/cookbook calc_transformer_mem.py adds the same).
    k-bit base: one Linear dequantised to 16 bits before use, 2 h I / t (formulas.md section 5).
    """
    a = job.arch
    ddp = np.where((cfg.zero_stage == 0) & (cfg.dp > 1), float(consts["ddp_bucket_bytes"]), 0.0)
    ds12 = _uses_deepspeed(job, cfg) & (cfg.zero_stage <= 2)
    ds = np.where(ds12, float(consts["ds_bucket_bytes"]), 0.0)
    live = 2.0 * np.minimum(float(consts["ds_zero3_max_live_parameters"]), job.arch.total_params / _f(cfg.tp))
    ds = np.where(_uses_deepspeed(job, cfg) & (cfg.zero_stage >= 3), live, ds)
    dequant = 2.0 * a.hidden * a.widest_mlp / _f(cfg.tp) if job.base_bits < 16 else 0.0
    return _i64(ddp + ds + dequant)


def cpu_offload_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Host memory per node for offloaded states (bytes, (n,)); 0 without offload.

    per GPU: P_train x (master + moments + 4 fp32 grads) / (t p N), plus for ``all`` the 16-bit (or k-bit)
    weights / (t p N); times the GPUs per node (min(cards, 8)) and DeepSpeed's additional_buffer_factor
    (``host_buffer_factor``, 1.5). With zero.Init this is the DeepSpeed ZeRO-3 estimator: 16P x 1.5 / nodes
    (optimizer offload), 18P x 1.5 / nodes (all). For ``all`` the weights are the whole model's (a frozen LoRA
    base too), never a ZeRO shard of them: the node holds its ranks' shards, i.e. all of it on one node.
    The node's host RAM must hold it (optimizer/models/hosts.py).
    """
    b = _state_bytes(job, cfg, consts)
    cards = _f(cfg.tp * cfg.pp * cfg.dp)
    states = trainable_params(job) * (b["master"] + b["moments"] + 4.0) / cards
    whole = replace(cfg, tp=np.ones_like(cfg.tp), pp=np.ones_like(cfg.pp), dp=np.ones_like(cfg.dp),
                    offload=np.zeros_like(cfg.offload), shard=None)  # the whole model, unsharded  # fmt: skip
    params = np.where(cfg.offload == _ALL, _f(weight_bytes(job, whole, consts)) / cards, 0.0)
    host = (states + params) * _f(np.minimum(cfg.cards, 8)) * float(consts["host_buffer_factor"])
    return _i64(np.where((cfg.offload == _NONE) | (cfg.zero_stage == 0), 0.0, host))


def output_gradient_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Gradient of the output layer (lm_head, or the tied embedding) when it is trained (bytes, (n,)).

    V x h x g16 / t for full fine-tuning below ZeRO-3 (at ZeRO-3/FSDP the unsharded gradient of one unit is already
    in :func:`zero3_gathered_bytes`); 0 for LoRA/QLoRA, whose output layer is frozen. Backward produces it first,
    from the logit gradients, before any activation is released, so it adds to activations + logits at the peak
    even when the other gradients are transient (:func:`breakdown`).
    """
    if job.method is not Method.full:
        return np.zeros(len(cfg), dtype=np.int64)
    g16 = _state_bytes(job, cfg, consts)["grad16"]
    out = job.arch.vocab * job.arch.hidden * g16 / _f(cfg.tp)
    return _i64(np.where(cfg.zero_stage >= 3, 0.0, out))


def breakdown(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """All components at the peak, their ``total`` and ``cpu_offload`` (int64 bytes, (n,)).

    total = weights + gradients + optimizer + activations + logits + overhead, where
    optimizer = O + max(0, G + T - gradients - A - LOG), T the foreach AdamW step's temporary
    (:func:`foreach_step_bytes`; 0 for the fused step ftopt launches): the step holds all gradients and T after the
    activations and logits are freed, and whatever that needs beyond the backward peak is the optimizer's.
    gradients = G if the gradients persist (gradient accumulation > 1, DeepSpeed's partitions, DDP buckets) else
    max(G, A + LOG + G_out) - A - LOG (peak W + O + max(A + LOG + G_out, G), formulas.md section 1, with G_out the
    output layer's gradient, produced first while the logits and activations are still live:
    :func:`output_gradient_bytes`), and
    overhead = context + buffers + ZeRO-3 gathered + fragmentation x (activations + logits + buffers + gathered)
    + FSDP's gradient pool: the caching allocator fragments around the tensors allocated and freed every
    micro-batch, while model states are allocated once at start-up (flat buffers) and pack tightly; FSDP's
    sharded gradients stay reserved in their stream's pool (:func:`fsdp_gradient_pool_bytes`).
    Extra keys: ``context`` (CUDA context and workspaces, invisible to torch's counters) and ``fragmentation``
    (reserved minus allocated), used by :func:`peak_for_metric`.
    """
    parts = {
        "weights": weight_bytes(job, cfg, consts),
        "optimizer": optimizer_bytes(job, cfg, consts),
        "activations": activation_bytes(job, cfg, consts),
        "logits": logits_bytes(job, cfg, consts),
    }
    grads = gradient_bytes(job, cfg, consts)
    transient = (cfg.grad_accum <= 1) & ~_uses_deepspeed(job, cfg) & ~((cfg.zero_stage == 0) & (cfg.dp > 1))
    # the output layer's weight gradient is the first one produced, while the logits and activations are live
    first = output_gradient_bytes(job, cfg, consts)
    in_flight = parts["activations"] + parts["logits"] + first
    parts["gradients"] = np.where(transient, np.maximum(grads, in_flight) - in_flight + first, grads)
    if job.optimizer_kernel != "fused":  # a foreach AdamW step holds every gradient and its copy of v once the
        step = grads + foreach_step_bytes(job, cfg, consts)  # activations and logits are freed
        parts["optimizer"] = parts["optimizer"] + np.maximum(step - parts["gradients"] - parts["activations"]
                                                             - parts["logits"], 0)  # fmt: skip
    inside = buffer_bytes(job, cfg, consts) + zero3_gathered_bytes(job, cfg, consts)
    dynamic = parts["activations"] + parts["logits"] + inside  # allocated and freed every micro-batch
    pool = _gradient_pool(job, cfg, grads, in_flight)  # sharded gradients kept reserved in their stream's pool
    parts["fragmentation"] = _i64(dynamic * float(consts["fragmentation"])) + pool
    parts["context"] = np.full(len(cfg), int(consts["context_bytes"]), dtype=np.int64)
    parts["overhead"] = inside + parts["fragmentation"] + parts["context"]
    parts["total"] = sum(parts[k] for k in COMPONENTS)
    parts["cpu_offload"] = cpu_offload_bytes(job, cfg, consts)
    return {k: parts[k] for k in (*COMPONENTS, "total", "cpu_offload", "context", "fragmentation")}


def peak_for_metric(parts: Mapping[str, np.ndarray], metric: str) -> np.ndarray:
    """The peak a given counter reports (bytes, (n,)), from :func:`breakdown`'s parts.

    allocated (``torch.cuda.max_memory_allocated``, torchtune "active"): total - context - fragmentation;
    reserved (caching-allocator reserve): total - context; nvidia-smi (device level: context, NCCL and the
    allocator's reserve): total. Source: formulas.md section 7 (what each counter includes).
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, not {metric!r}")
    total = parts["total"]
    if metric == "nvidia-smi":
        return total
    if metric == "reserved":
        return total - parts["context"]
    return total - parts["context"] - parts["fragmentation"]
