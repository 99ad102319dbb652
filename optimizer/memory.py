"""Per-GPU peak training memory, one pure function per component.

Every function takes a :class:`~optimizer.configs.Job` (scalars), a :class:`~optimizer.configs.Configs` (arrays of
shape ``(n,)``) and the ``memory`` section of ``catalogs/calibration.yaml``, and returns int64 bytes of shape
``(n,)``. Notation (../shared/reference/formulas.md, Part I): P parameters, L layers, h hidden, I SwiGLU width,
a heads, h_kv = kv_heads x head_dim, V vocab, s sequence length, b micro-batch, T = s b tokens per micro-batch,
t tensor-parallel degree, p pipeline degree, N = dp sharding degree.

Sources: ZeRO (Rajbhandari et al. 2019, arXiv 1910.02054, section 3) for model states; DeepSpeed's
``estimate_zero2/zero3_model_states_mem_needs`` for its exact per-stage bytes; Korthikanti et al. 2022
(arXiv 2205.05198, section 4) for activations; Dettmers et al. 2023 (QLoRA, arXiv 2305.14314) for NF4 with double
quantisation; HF and torchtune sources for logits and dtype defaults (formulas.md section 4.5 and section 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optimizer.configs import CHECKPOINTING, OFFLOAD, OPTIMIZER, PRECISION, Configs, Job
from optimizer.schema import Attention, Checkpointing, Framework, Loss, Method, Offload, OptimizerName, Precision

GIB = 2**30
_NONE, _OPT, _ALL = (OFFLOAD.index(o) for o in (Offload.none, Offload.optimizer, Offload.all))
_CK_NONE, _CK_SEL, _CK_FULL = (CHECKPOINTING.index(c) for c in Checkpointing)
_FP32 = PRECISION.index(Precision.fp32)

COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "overhead")


def _i64(x: Any) -> np.ndarray:
    return np.ceil(np.asarray(x, dtype=np.float64)).astype(np.int64)


def _profile(job: Job, consts: Mapping[str, Any]) -> Mapping[str, Any]:
    """The framework's dtype profile from calibration (``memory.profiles.<framework>[_<sharding>]``)."""
    profiles = consts["profiles"]
    key = f"{job.framework.value}_{job.sharding.value}"
    return profiles.get(key, profiles[job.framework.value])


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
    targets = set(job.lora.targets)
    if "all-linear" in targets:
        targets |= set(per_module)
    per_layer = sum(w for name, w in per_module.items() if name in targets)
    head = (h + a.vocab) if "lm_head" in targets else 0
    return r * (per_layer * a.layers + head)


def linear_params(job: Job) -> int:
    """Parameters inside the blocks' Linear layers (the part a 4/8-bit base quantises): L x (2h^2 + 2h h_kv + 3hI E)."""
    a = job.arch
    return a.layers * (2 * a.hidden * a.hidden + 2 * a.hidden * a.kv_width + 3 * a.hidden * a.intermediate * a.experts)


def trainable_params(job: Job) -> int:
    """Parameters that carry gradients and optimizer state: all (full) or the adapters (LoRA/QLoRA)."""
    return job.arch.total_params if job.method is Method.full else lora_params(job)


def _model_split(cfg: Configs) -> np.ndarray:
    """Model-parallel split t x p of every weight matrix (float array)."""
    return (cfg.tp * cfg.pp).astype(np.float64)


# ------------------------------------------------------------------------------------------------ model states


def weight_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Resident weights per GPU.

    full: P x w_bytes / (t p), w_bytes from the framework profile (2 for bf16 DeepSpeed/torchtune/FSDP compute
    copies; fp32 runs 4), divided by N at ZeRO-3, 0 on the GPU when parameters are offloaded (stage 3, ``all``).
    LoRA/QLoRA: frozen base = P_lin x base_bytes + (P - P_lin) x nonlin_bytes, where base_bytes is 2 (16-bit),
    1 (8-bit) or the NF4 rate 0.5 + 0.5/64 x (8/32 + 32/(32 x 256)) (QLoRA paper, double quantisation, about
    0.516 B/param), plus adapters at the profile's adapter dtype. Same division by t p and by N at ZeRO-3.
    """
    prof = _profile(job, consts)
    split = _model_split(cfg)
    z3 = cfg.zero_stage >= 3
    shard = np.where(z3, cfg.dp, 1).astype(np.float64)
    p_total = float(job.arch.total_params)
    fp32 = cfg.precision == _FP32
    if job.method is Method.full:
        w = np.where(fp32, 4.0, float(prof["weight_bytes"])) * p_total
        resident = w / split / shard
        return _i64(np.where(z3 & (cfg.offload == _ALL), 0.0, resident))
    p_lin = float(linear_params(job))
    base_bytes = {16: 2.0, 8: 1.0, 4: float(consts["nf4_bytes_per_param"])}[job.base_bits]
    nonlin = float(prof["kbit_nonlinear_bytes"] if job.base_bits < 16 else 2.0)
    base = p_lin * base_bytes + (p_total - p_lin) * nonlin
    adapters = lora_params(job) * float(prof["adapter_bytes"])
    resident = (base + adapters) / split / shard
    return _i64(np.where(z3 & (cfg.offload == _ALL), adapters / split / shard, resident))


def gradient_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Gradients per GPU: P_train x g_bytes / (t p), divided by N from ZeRO-2 on; 0 extra when fully offloaded.

    g_bytes comes from the profile: DeepSpeed keeps 16-bit grads plus fp32 partitions (2 + 4, as in its
    estimator), FSDP and torchtune keep grads in the parameter dtype. Adapters use the adapter dtype.
    """
    prof = _profile(job, consts)
    split = _model_split(cfg)
    shard = np.where(cfg.zero_stage >= 2, cfg.dp, 1).astype(np.float64)
    if job.method is Method.full:
        g = np.where(cfg.precision == _FP32, 4.0, float(prof["grad_bytes"]))
    else:
        g = np.full(len(cfg), float(prof["adapter_bytes"]))
    grads = trainable_params(job) * g / split / shard
    offloaded = (cfg.zero_stage >= 3) & (cfg.offload == _ALL)
    return _i64(np.where(offloaded, 0.0, grads))


def optimizer_state_bytes_per_param(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Bytes of optimizer state per trainable parameter, master weights included.

    AdamW: 4 (fp32 master) + 4 + 4 (m, v) = 12 in mixed precision (ZeRO paper, K = 12); pure-bf16 profiles
    (torchtune) keep m, v in bf16 and no master: 4. 8-bit AdamW: 2 (+ master 4 where the profile keeps one).
    SGD with momentum: 4 (+ master). Adafactor: factored second moment, about 4 with master.
    """
    prof = _profile(job, consts)
    master = float(prof["master_bytes"]) if job.method is Method.full else 0.0
    moments = {
        OptimizerName.adamw: float(prof["adam_moment_bytes"]),
        OptimizerName.adamw_8bit: 2.0,
        OptimizerName.paged_adamw_8bit: 2.0,
        OptimizerName.sgd: float(prof["adam_moment_bytes"]) / 2,
        OptimizerName.adafactor: 0.0,
    }
    per_code = np.array([master + moments[o] for o in OPTIMIZER])
    if job.method is not Method.full:
        adapter_moments = float(prof["adapter_bytes"]) * 2
        per_code = np.array([adapter_moments if o is OptimizerName.adamw else moments[o] for o in OPTIMIZER])
    return per_code[cfg.optimizer]


def optimizer_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Optimizer states on the GPU: P_train x k / (t p), divided by N from ZeRO-1 on, 0 when offloaded to the CPU.

    Paged 8-bit optimizers live in CUDA unified memory that torch's counters do not see (formulas.md section 1);
    they are still counted here because they occupy the card until the driver pages them out.
    """
    split = _model_split(cfg)
    shard = np.where(cfg.zero_stage >= 1, cfg.dp, 1).astype(np.float64)
    states = trainable_params(job) * optimizer_state_bytes_per_param(job, cfg, consts) / split / shard
    return _i64(np.where((cfg.offload != _NONE) & (cfg.zero_stage >= 1), 0.0, states))


# ------------------------------------------------------------------------------------------------ activations


def activation_bytes_per_token_layer(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Saved activations of one decoder layer per token with no recomputation (bytes, shape (n,)).

    Llama-style layer with RMSNorm, RoPE, GQA and SwiGLU (formulas.md section 4.3, our derivation from
    Korthikanti et al. 2022 section 4.1): c_h h + c_kv h_kv + c_I I x experts_per_token, with coefficients from the
    calibration (fused kernels about 12, 4, 8; eager modules add fp32 norm and RoPE copies). Eager attention adds
    Korthikanti's 5 a s bytes per token for the s x s scores, softmax and dropout mask. Divided by t (sequence
    parallelism assumed with tensor parallelism).
    """
    a = job.arch
    c = consts["activation"][
        "eager" if job.framework is Framework.torchtune or job.attention is Attention.eager else "fused"
    ]
    per = c["h"] * a.hidden + c["h_kv"] * a.kv_width + c["intermediate"] * a.intermediate * a.experts_per_token
    if job.attention is Attention.eager:
        per += 5.0 * a.heads * job.seq_len
    return per / cfg.tp.astype(np.float64)


def activation_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Activations held at the peak of the backward pass for one micro-batch of T = s b tokens.

    none: T x L_local x c_layer. full checkpointing: T x (2h L_local + c_layer), the 16-bit layer inputs plus one
    layer being recomputed (Korthikanti section 4.1; formulas.md section 4.4). selective: recompute only the
    attention core: T x L_local x (c_layer - saved_attention_fraction x c_layer). With 1F1B pipelining the first
    stage holds p micro-batches of L/p layers, i.e. L layers' worth (Narayanan et al. 2021).
    """
    tokens = (cfg.micro_batch * job.seq_len).astype(np.float64)
    layers_local = job.arch.layers / cfg.pp.astype(np.float64)
    in_flight = np.minimum(cfg.pp, np.maximum(cfg.grad_accum, 1)).astype(np.float64)
    per_layer = activation_bytes_per_token_layer(job, cfg, consts)
    keep_input = 2.0 * job.arch.hidden / cfg.tp.astype(np.float64)
    none = tokens * layers_local * per_layer * in_flight
    full = tokens * (keep_input * layers_local * in_flight + per_layer)
    sel = none * float(consts["selective_keep_fraction"])
    out = np.select([cfg.checkpointing == _CK_NONE, cfg.checkpointing == _CK_SEL], [none, sel], full)
    return _i64(out)


def logits_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Output-layer logits and cross-entropy buffers: T x V x c_log / t.

    c_log per loss implementation from calibration: standard HF (bf16 logits, fp32 upcast, fp32 log-softmax and
    grads, about 12-16 B), chunked (torchtune CEWithChunkedOutputLoss, about 4 B), fused linear-CE (about 0).
    Source: formulas.md section 4.5 (transformers 4.x LlamaForCausalLM, torchtune, Liger).
    """
    loss = job.loss
    if loss is Loss.auto:
        loss = Loss(consts["default_loss"][job.framework.value])
    tokens = (cfg.micro_batch * job.seq_len).astype(np.float64)
    return _i64(tokens * job.arch.vocab * float(consts["logits_bytes_per_vocab_token"][loss.value]) / cfg.tp)


# ------------------------------------------------------------------------------------------------ overheads


def overhead_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """CUDA context and workspaces, communication buffers, ZeRO-3 gathered layers, dequantisation transients.

    context (calibration, about 0.5-1 GiB) + ZeRO-1/2 bucket bytes when dp > 1 + at ZeRO-3 the live gathered
    16-bit parameters and gradients of ``zero3_live_layers`` layers (DeepSpeed's 4 x largest layer, its
    estimator) + for k-bit bases one dequantised h x I matrix in 16 bits (formulas.md section 5).
    """
    a = job.arch
    ctx = float(consts["context_bytes"])
    multi = cfg.dp > 1
    buckets = np.where(multi & (cfg.zero_stage >= 1) & (cfg.zero_stage <= 2), float(consts["zero12_bucket_bytes"]), 0.0)
    ddp = np.where(multi & (cfg.zero_stage == 0), float(consts["ddp_bucket_bytes"]), 0.0)
    layer16 = 2.0 * a.layer_params / cfg.tp
    gathered = np.where(cfg.zero_stage >= 3, float(consts["zero3_live_layers"]) * 2.0 * layer16, 0.0)
    dequant = 2.0 * a.hidden * a.intermediate if job.base_bits < 16 else 0.0
    return _i64(ctx + buckets + ddp + gathered + dequant)


def cpu_offload_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Host memory per node for offloaded states: optimizer (fp32 master + moments) and, for ``all``, parameters
    and fp32 gradients, times DeepSpeed's additional_buffer_factor 1.5 (DeepSpeed memory docs).
    """
    p = float(trainable_params(job))
    per_gpu_states = p * optimizer_state_bytes_per_param(job, cfg, consts) / (cfg.tp * cfg.pp * cfg.dp)
    params = np.where(cfg.offload == _ALL, float(job.arch.total_params) * 6.0 / (cfg.tp * cfg.pp * cfg.dp), 0.0)
    per_node_gpus = np.minimum(cfg.cards, 8)
    host = (per_gpu_states + params) * per_node_gpus * float(consts["host_buffer_factor"])
    return _i64(np.where(cfg.offload == _NONE, 0.0, host))


def breakdown(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """All components, the allocator-fragmentation-adjusted ``total`` and ``cpu_offload`` (int64 bytes, (n,)).

    total = (weights + gradients + optimizer + activations + logits) x (1 + fragmentation) + overhead.
    """
    parts = {
        "weights": weight_bytes(job, cfg, consts),
        "gradients": gradient_bytes(job, cfg, consts),
        "optimizer": optimizer_bytes(job, cfg, consts),
        "activations": activation_bytes(job, cfg, consts),
        "logits": logits_bytes(job, cfg, consts),
        "overhead": overhead_bytes(job, cfg, consts),
    }
    tensors = sum(parts[k] for k in COMPONENTS if k != "overhead")
    parts["total"] = _i64(tensors * (1.0 + float(consts["fragmentation"]))) + parts["overhead"]
    parts["cpu_offload"] = cpu_offload_bytes(job, cfg, consts)
    return parts
