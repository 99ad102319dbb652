"""Per-GPU activations and loss buffers of one micro-batch, one pure function per component.

Every function takes a :class:`~optimizer.configs.Job` (scalars), a :class:`~optimizer.configs.Configs` (arrays of
shape ``(n,)``) and the ``memory`` section of ``catalogs/calibration.yaml``, and returns int64 bytes of shape
``(n,)`` (:func:`activation_bytes_per_token_layer`: float bytes per token and layer). Notation
(../shared/reference/formulas.md, Part I): L layers, h hidden, I SwiGLU width, a heads, h_kv = kv_heads x
head_dim, V vocab, s sequence length, b micro-batch, T = s b tokens per micro-batch, t tensor-parallel degree,
p pipeline degree. :mod:`optimizer.models.memory` adds these to the model states and overheads at the peak.

Sources: Korthikanti et al. 2022 (arXiv 2205.05198, section 4) for activations; Narayanan et al. 2021 for the
micro-batches a 1F1B pipeline stage holds; HF and torchtune sources for logits and dtype defaults (formulas.md
section 4.5 and section 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optimizer.configs import CHECKPOINTING, Configs, Job
from optimizer.schema import Attention, Checkpointing, Loss, Method

_CK_NONE, _CK_SEL = CHECKPOINTING.index(Checkpointing.none), CHECKPOINTING.index(Checkpointing.selective)


def _i64(x: Any) -> np.ndarray:
    return np.ceil(np.asarray(x, dtype=np.float64)).astype(np.int64)


def _f(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _targets(job: Job) -> set[str]:
    targets = set(job.lora.targets) if job.lora is not None else set()
    if "all-linear" in targets:
        targets |= {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    return targets


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
