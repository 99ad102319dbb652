"""Per-GPU peak training memory, one pure function per component.

Every function takes a :class:`~optimizer.configs.Job` (scalars), a :class:`~optimizer.configs.Configs` (arrays of
shape ``(n,)``) and the ``memory`` section of ``catalogs/calibration.yaml``, and returns int64 bytes of shape
``(n,)``. Notation (../shared/reference/formulas.md, Part I): P parameters, L layers, h hidden, I SwiGLU width,
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
of that maximum above A + LOG. ``overhead`` holds the CUDA context (``context``, outside torch's counters),
communication buffers, ZeRO-3/FSDP gathered parameters, k-bit dequantisation and allocator fragmentation
(``fragmentation``, reserved minus allocated); :func:`peak_for_metric` maps the total to what a counter reports.

Sources: ZeRO (Rajbhandari et al. 2019, arXiv 1910.02054, section 3) for model states; DeepSpeed's
``estimate_zero2/zero3_model_states_mem_needs`` for its exact per-stage bytes; Korthikanti et al. 2022
(arXiv 2205.05198, section 4) for activations; Dettmers et al. 2023 (QLoRA, arXiv 2305.14314) for NF4 with double
quantisation; HF and torchtune sources for logits and dtype defaults (formulas.md section 4.5 and section 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from optimizer.configs import CHECKPOINTING, OFFLOAD, OPTIMIZER, PRECISION, Configs, Job
from optimizer.schema import (
    Attention,
    Checkpointing,
    Framework,
    Loss,
    Method,
    Offload,
    OptimizerName,
    Precision,
    Sharding,
)

GIB = 2**30
_NONE, _ALL = OFFLOAD.index(Offload.none), OFFLOAD.index(Offload.all)
_CK_NONE, _CK_SEL = CHECKPOINTING.index(Checkpointing.none), CHECKPOINTING.index(Checkpointing.selective)
_FP32 = PRECISION.index(Precision.fp32)

COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead")
METRICS = ("allocated", "reserved", "nvidia-smi")


def _i64(x: Any) -> np.ndarray:
    return np.ceil(np.asarray(x, dtype=np.float64)).astype(np.int64)


def _f(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


# ------------------------------------------------------------------------------------------------ engines


def _sharded_profile_name(job: Job) -> str:
    """Profile used at ZeRO stage >= 1: hf -> hf_<sharding>; torchtune (FSDP2) and nemo keep their own."""
    return f"hf_{job.sharding.value}" if job.framework is Framework.hf else job.framework.value


def _uses_deepspeed(job: Job, cfg: Configs) -> np.ndarray:
    """Rows run by DeepSpeed ZeRO (hf framework, sharding deepspeed, stage >= 1), bool (n,)."""
    return (cfg.zero_stage >= 1) & (job.framework is Framework.hf and job.sharding is Sharding.deepspeed)


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
    chosen; ``lm_head`` adds r (h + V) once. MoE multiplies the MLP terms by the expert count. Source: Hu et al.
    2021 (LoRA, arXiv 2106.09685) section 4; checked in formulas.md section 5 (Llama-3.1-8B r16 all-linear = 41.94M).
    """
    if job.lora is None:
        return 0
    a = job.arch
    h, kv, inter, r = a.hidden, a.kv_width, a.intermediate, job.lora.rank
    per_module = {
        "q_proj": h + h,
        "k_proj": h + kv,
        "v_proj": h + kv,
        "o_proj": h + h,
        "gate_proj": (h + inter) * a.experts,
        "up_proj": (h + inter) * a.experts,
        "down_proj": (inter + h) * a.experts,
    }
    targets = _targets(job)
    per_layer = sum(w for name, w in per_module.items() if name in targets)
    head = (h + a.vocab) if "lm_head" in targets else 0
    return r * (per_layer * a.layers + head)


def _targets(job: Job) -> set[str]:
    targets = set(job.lora.targets) if job.lora is not None else set()
    if "all-linear" in targets:
        targets |= {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    return targets


def linear_params(job: Job) -> int:
    """Parameters inside the blocks' Linear layers (the part a 4/8-bit base quantises): L x (2h^2 + 2h h_kv + 3hI E)."""
    a = job.arch
    return a.layers * (2 * a.hidden * a.hidden + 2 * a.hidden * a.kv_width + 3 * a.hidden * a.intermediate * a.experts)


def trainable_params(job: Job) -> int:
    """Parameters that carry gradients and optimizer state: all (full) or the adapters (LoRA/QLoRA)."""
    return job.arch.total_params if job.method is Method.full else lora_params(job)


def largest_module_params(job: Job) -> int:
    """Parameters of the largest single module, DeepSpeed's ``largest_layer_params``: max(V h, h I, h^2).

    The input embedding (and an untied lm_head) is V h; the largest block Linear is an MLP projection h x I.
    Source: DeepSpeed docs, memory.rst (model_to_params sums ``m.parameters(recurse=False)`` per module).
    """
    a = job.arch
    return max(a.vocab * a.hidden, a.hidden * a.intermediate, a.hidden * a.hidden)


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
    double quantisation), nonlin the profile's ``kbit_nonlinear_bytes`` (PEFT prepare_model_for_kbit_training
    casts them to fp32: 4; torchtune, DeepSpeed and FSDP keep 2). Plus adapters x the profile's
    ``adapter_weight_bytes`` (PEFT fp32 adapters: 4). Same division by t p and N.
    """
    split = _model_split(cfg)
    z3 = cfg.zero_stage >= 3
    shard = np.where(z3, cfg.dp, 1).astype(np.float64)
    per_param = _state_bytes(job, cfg, consts)["weight"]
    trained = trainable_params(job) * per_param
    if job.method is Method.full:
        base = np.zeros(len(cfg))
    else:
        p_lin = float(linear_params(job))
        base16 = _field(job, cfg, consts, "frozen_base_bytes")
        if job.base_bits == 16:
            base = job.arch.total_params * base16
        else:
            kbit = {8: 1.0, 4: float(consts["nf4_bytes_per_param"])}[job.base_bits]
            base = p_lin * kbit + (job.arch.total_params - p_lin) * _field(job, cfg, consts, "kbit_nonlinear_bytes")
    resident = (base + trained) / split / shard
    return _i64(np.where(z3 & (cfg.offload == _ALL), 0.0, resident))


def gradient_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """All gradients held per GPU after backward (bytes, (n,)), before the peak-phase rule of :func:`breakdown`.

    P_train x (g16 x f16 + g32 / N_1) / (t p). g16 = 16-bit (or the profile's) gradients: unsharded at stage
    <= 1, / N at stage 2, at stage 3 / N (FSDP, torchtune) or 0 (DeepSpeed reduces them through buckets).
    g32 = DeepSpeed's fp32 gradient partitions (4 B), / N from stage 1. DeepSpeed estimator
    (stage_1_and_2.py, stage3.py): ZeRO-2 = 2P + 18P/N with 18 = 2 + 4 (grads) + 12 (optimizer); ZeRO-3 =
    18P/N + 4 P_ll with 18 = 2 (params) + 4 (fp32 grads) + 12. With offload (stage >= 1) the fp32 partitions
    and, from stage 2, the 16-bit gradients live on the CPU: ZeRO-2 offload = 2P, ZeRO-3 offload = 4 P_ll + 2P/N.
    Optimizer in backward (``training.optimizer_in_backward``, torchtune optimizer_in_bwd; gradient accumulation
    1 only): each parameter is stepped and its gradient freed as soon as it is produced, so at most the largest
    module's gradients, min(P_train, P_ll) x g16 / (t p), are held (formulas.md section 8, "G ~ 0").
    """
    split = _model_split(cfg)
    n = cfg.dp.astype(np.float64)
    b = _state_bytes(job, cfg, consts)
    ds = _uses_deepspeed(job, cfg)
    f16 = np.select([cfg.zero_stage <= 1, cfg.zero_stage == 2, ds], [1.0, 1.0 / n, 0.0], 1.0 / n)
    f32 = np.where(cfg.zero_stage >= 1, 1.0 / n, 1.0)
    offloaded = (cfg.offload != _NONE) & (cfg.zero_stage >= 1)
    f16 = np.where(offloaded & (cfg.zero_stage >= 2), 0.0, f16)
    f32 = np.where(offloaded, 0.0, f32)
    grads = trainable_params(job) * (b["grad16"] * f16 + b["grad32"] * f32) / split
    if job.optimizer_in_backward:
        # one module's gradients live at a time (formulas.md section 8: G ~ 0 with optimizer-in-backward)
        one = min(trainable_params(job), largest_module_params(job)) * b["grad16"] / split
        grads = np.where(cfg.grad_accum <= 1, np.minimum(grads, one), grads)
    return _i64(np.where((cfg.zero_stage >= 3) & (cfg.offload == _ALL), 0.0, grads))


def optimizer_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Optimizer states on the GPU (bytes, (n,)): P_train x (master + moments) / (t p), / N from ZeRO-1 on.

    master = fp32 copy kept by DeepSpeed and Megatron (4 B; ZeRO paper K = 12 = 4 + 8), none for HF AMP (the
    weights are fp32 already) and torchtune (pure bf16). 0 on the GPU when offloaded (stage >= 1). Paged 8-bit
    optimizers live in CUDA unified memory that torch's counters do not see (formulas.md section 1); they are
    still counted because they occupy the card until the driver pages them out.
    """
    split = _model_split(cfg)
    shard = np.where(cfg.zero_stage >= 1, cfg.dp, 1).astype(np.float64)
    b = _state_bytes(job, cfg, consts)
    states = trainable_params(job) * (b["master"] + b["moments"]) / split / shard
    return _i64(np.where((cfg.offload != _NONE) & (cfg.zero_stage >= 1), 0.0, states))


# ------------------------------------------------------------------------------------------------ activations


def activation_bytes_per_token_layer(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Saved activations of one decoder layer per token with no recomputation (bytes, float (n,)).

    Llama-style layer (RMSNorm, RoPE, GQA, SwiGLU, no dropout), counted tensor by tensor from what autograd saves
    (formulas.md sections 4.1-4.3; Korthikanti et al. 2022 section 4.1 for the method):
    frozen part, saved whatever is trained: c_h h + c_kv h_kv + c_I I E_tok + 4a. eager modules (HF, torchtune
    without ``training.compile``): 2 norms x fp32 input copy 4h, attention q and out 4h, k and v 4 h_kv, SwiGLU
    SiLU input, SiLU output and up output 6I; fused kernels (Megatron/TE, and torch.compile, which fuses the fp32
    norm upcast and the SwiGLU: formulas.md section 4.3 "fused or compiled kernels"): bf16 norm inputs 4h and a
    fused SwiGLU 4I; full fine-tuning then adds 6h + 2I instead of 10h + 2I. Llama-3.2-3B full fine-tuning:
    compile saves 8h + 2I = 40,960 B per token and layer, 8.75 GiB at 8192 tokens x 28 layers (torchtune's
    ladder: 9.0). 4a: the fp32 log-sum-exp per head of flash/SDPA attention. A frozen Linear saves nothing (dX
    needs only W).
    full fine-tuning adds the inputs of the trainable Linears and norm weights (``trainable_extra``:
    q/k/v input, o_proj input, gate/up input 2h each + norm outputs, down_proj input 2I).
    LoRA adds the inputs its adapters save: 2h for q/k/v (one shared tensor), 2h for o, 2h for gate/up, 2I E for
    down; with dropout > 0 each adapted module also keeps its dropped-out input and mask, 3 d_in.
    eager attention adds the s x s scores: fp32 softmax output and its bf16 copy, 6 a s (Korthikanti's 5as with
    an fp32 softmax and no dropout mask). Divided by t (sequence parallelism assumed with tensor parallelism).
    """
    a = job.arch
    h, kv, inter = a.hidden, a.kv_width, a.intermediate * a.experts_per_token
    kind = consts["activation_kernels"]["compiled" if job.compile else job.framework.value]
    c = consts["activation"][kind]
    fr = c["frozen"]
    per = fr["h"] * h + fr["h_kv"] * kv + fr["intermediate"] * inter + 4.0 * a.heads
    if job.method is Method.full:
        per += c["trainable_extra"]["h"] * h + c["trainable_extra"]["intermediate"] * inter
    else:
        per += _lora_saved_inputs(job)
    if job.attention is Attention.eager:
        per += float(consts["eager_scores_bytes_per_head_token"]) * a.heads * job.seq_len
    return per / cfg.tp.astype(np.float64)


def _lora_saved_inputs(job: Job) -> float:
    """Bytes per token per layer that LoRA adapters save: their 16-bit inputs, plus dropout copies and masks."""
    a = job.arch
    h, inter = a.hidden, a.intermediate * a.experts_per_token
    t = _targets(job)
    groups = [
        ({"q_proj", "k_proj", "v_proj"}, h),
        ({"o_proj"}, h),
        ({"gate_proj", "up_proj"}, h),
        ({"down_proj"}, inter),
    ]
    saved = sum(2.0 * width for names, width in groups if names & t)  # 16-bit input, shared within a group
    if job.lora is not None and job.lora.dropout > 0:
        d_in = {"q_proj": h, "k_proj": h, "v_proj": h, "o_proj": h, "gate_proj": h, "up_proj": h, "down_proj": inter}
        saved += sum(3.0 * d_in[m] for m in t if m in d_in)  # 2 B dropped-out copy + 1 B mask per module
    return saved


def activation_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Activations held at the start of the backward pass for one micro-batch of T = s b tokens (bytes, (n,)).

    none: T x L_loc x c_layer. full checkpointing: T x (2h/t x L_loc + c_layer), the 16-bit layer inputs plus one
    layer being recomputed (Korthikanti section 4.1; formulas.md section 4.4). selective: T x (f x c_layer x L_loc
    + (1 - f) x c_layer), keeping a fraction f = ``selective_keep_fraction`` of each layer (torchtitan's per-op
    policy saves the attention outputs and every other matmul output) and recomputing the rest of one layer.
    With 1F1B pipelining the first stage holds min(p, GA) micro-batches of L/p layers (Narayanan et al. 2021).
    Activation offloading (``training.activation_offload``; torchtune OffloadActivations, formulas.md section 4.4
    "moves the saved inputs to the CPU") keeps only the layer being computed on the GPU, T x c_layer, whatever the
    checkpointing; the rest lives in pinned host RAM (the prefetched next layer's inputs, 2hT, are neglected).
    Llama-3.2-3B at 8192 tokens with full checkpointing: 2h L T = 1.31 GiB moved, the "about 1.3 GiB" of the
    torchtune ladder's notes.
    """
    tokens = _f(cfg.micro_batch * job.seq_len)
    layers_local = job.arch.layers / _f(cfg.pp) * _f(np.minimum(cfg.pp, np.maximum(cfg.grad_accum, 1)))
    per_layer = activation_bytes_per_token_layer(job, cfg, consts)
    keep_input = 2.0 * job.arch.hidden / _f(cfg.tp)
    frac = float(consts["selective_keep_fraction"])
    none = tokens * layers_local * per_layer
    full = tokens * (keep_input * layers_local + per_layer)
    sel = tokens * (frac * per_layer * layers_local + (1.0 - frac) * per_layer)
    if job.activation_offload:
        return _i64(np.broadcast_to(tokens * per_layer, (len(cfg),)))
    return _i64(np.select([cfg.checkpointing == _CK_NONE, cfg.checkpointing == _CK_SEL], [none, sel], full))


def logits_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Output-layer logits and cross-entropy buffers at their peak: T x V x c_loss / t (bytes, (n,)).

    c_loss per loss implementation (calibration ``logits_bytes_per_vocab_token``): standard (16-bit logits, an
    fp32 upcast, fp32 log-softmax and its gradient: 12-16 B per vocab entry per token in HF/torchtune, less where
    the model keeps bf16 logits), chunked (torchtune CEWithChunkedOutputLoss, 8 token chunks), fused linear-CE
    (Liger, CCE: about 0). Source: formulas.md section 4.5. ``auto`` takes the framework default
    (``default_loss``). ``standard`` is read per framework (``standard_loss_kind``): a bf16 cross-entropy
    (``standard``, fitted on the Qwen cases, whose remote code keeps bf16 logits) or, for torchtune, whose
    TransformerDecoder returns ``self.output(h).float()``, one on fp32-upcast logits (``standard_fp32``: fp32
    logits, their fp32 log-softmax and its fp32 gradient, 4 B each = 12 B, the low end of formulas.md's 12-16 B;
    not fitted). chunked is counted from what autograd keeps (not fitted): eager (``chunked``), the bf16 logits
    (2 B, held by the recipe until the loss returns) + each chunk's fp32 log-softmax output saved for backward
    (4 B) + the fp32 upcast of the chunk in flight (4/8 B) = 6.5 B; with ``training.compile`` torchtune compiles
    the per-chunk upcast + cross-entropy (torchtune/training/_compile.py compile_loss: "we only compile the upcast
    + cross-entropy calculation, not the chunking"), so the fp32 softmax is fused and recomputed in backward and
    only the bf16 logits stay saved, plus one chunk's bf16 logit gradient in backward: 2 + 2/8 = 2.25 B
    (``chunked_compiled``).
    """
    loss = job.loss
    if loss is Loss.auto:
        loss = Loss(consts["default_loss"][job.framework.value])
    kind = consts["standard_loss_kind"][job.framework.value] if loss is Loss.standard else loss.value
    if loss is Loss.chunked and job.compile:
        kind = "chunked_compiled"  # torchtune compile_loss compiles the per-chunk upcast + cross-entropy only
    tokens = _f(cfg.micro_batch * job.seq_len)
    return _i64(tokens * job.arch.vocab * float(consts["logits_bytes_per_vocab_token"][kind]) / cfg.tp)


# ------------------------------------------------------------------------------------------------ overheads


def zero3_gathered_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Parameters gathered (unsharded) at ZeRO-3 / FSDP full sharding, with their gradients (bytes, (n,)).

    DeepSpeed: 4 x P_ll / t, the 16-bit parameters and gradients of the largest module (its estimator's
    ``largest_layer_memory``; P_ll from :func:`largest_module_params`). FSDP (hf_fsdp, torchtune FSDP2):
    (u x w + g) x max(P_layer, V h) / t with u = ``fsdp_live_units`` parameter units in flight (the one computing
    and the one prefetched; PyTorch FSDP backward_prefetch), w = 2 B (16-bit) or the NF4 rate for a 4-bit base
    stored as bf16 words, and g = 2 B for one unit's unsharded gradients before reduce-scatter (full fine-tuning
    only: a frozen base has none). 0 below stage 3.
    """
    a = job.arch
    ds = 4.0 * largest_module_params(job)
    w = float(consts["nf4_bytes_per_param"]) if job.base_bits == 4 else 2.0
    grad_unit = 2.0 if job.method is Method.full else 0.0  # a frozen base has no gradients to reduce-scatter
    fsdp = (float(consts["fsdp_live_units"]) * w + grad_unit) * max(a.layer_params, a.vocab * a.hidden)
    gathered = np.where(_uses_deepspeed(job, cfg), ds, fsdp) / _f(cfg.tp)
    return _i64(np.where(cfg.zero_stage >= 3, gathered, 0.0))


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
    dequant = 2.0 * a.hidden * a.intermediate / _f(cfg.tp) if job.base_bits < 16 else 0.0
    return _i64(ddp + ds + dequant)


def cpu_offload_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Host memory per node for offloaded states (bytes, (n,)); 0 without offload.

    per GPU: P_train x (master + moments + 4 fp32 grads) / (t p N), plus for ``all`` the 16-bit (or k-bit)
    weights / (t p N); times the GPUs per node (min(cards, 8)) and DeepSpeed's additional_buffer_factor
    (``host_buffer_factor``, 1.5). With zero.Init this is the DeepSpeed ZeRO-3 estimator: 16P x 1.5 / nodes
    (optimizer offload), 18P x 1.5 / nodes (all). Offers do not yet state host RAM, so it is reported only.
    """
    b = _state_bytes(job, cfg, consts)
    cards = _f(cfg.tp * cfg.pp * cfg.dp)
    states = trainable_params(job) * (b["master"] + b["moments"] + 4.0) / cards
    whole = replace(cfg, tp=np.ones_like(cfg.tp), pp=np.ones_like(cfg.pp), dp=np.ones_like(cfg.dp),
                    offload=np.zeros_like(cfg.offload))  # fmt: skip
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
    gradients = G if the gradients persist (gradient accumulation > 1, DeepSpeed's partitions, DDP buckets) else
    max(G, A + LOG + G_out) - A - LOG (peak W + O + max(A + LOG + G_out, G), formulas.md section 1, with G_out the
    output layer's gradient, produced first while the logits and activations are still live:
    :func:`output_gradient_bytes`), and
    overhead = context + buffers + ZeRO-3 gathered + fragmentation x (activations + logits + buffers + gathered):
    the caching allocator fragments around the tensors allocated and freed every micro-batch, while model states
    are allocated once at start-up (flat buffers) and pack tightly.
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
    inside = buffer_bytes(job, cfg, consts) + zero3_gathered_bytes(job, cfg, consts)
    dynamic = parts["activations"] + parts["logits"] + inside  # allocated and freed every micro-batch
    parts["fragmentation"] = _i64(dynamic * float(consts["fragmentation"]))
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
