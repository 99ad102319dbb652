"""Per-GPU activations and loss buffers of one micro-batch, one pure function per component.

Every function takes a :class:`~optimizer.models.configs.Job` (scalars), a :class:`~optimizer.models.configs.Configs`
(arrays of
shape ``(n,)``) and the ``memory`` section of ``catalogs/calibration.yaml``, and returns int64 bytes of shape
``(n,)`` (:func:`activation_bytes_per_token_layer`: float bytes per token and layer). Notation
(docs/formulas.md, Part I): L layers, h hidden, I SwiGLU width, a heads, h_kv = kv_heads x
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

from optimizer.inputs.schema import Attention, Checkpointing, Loss, Method
from optimizer.models.configs import CHECKPOINTING, Configs, Job
from optimizer.models.pipeline import pipeline_chunks

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
    h, kv, inter = a.hidden, a.kv_width, a.active_width  # MoE: the routed (and shared) experts' widths
    kind = consts["activation_kernels"]["compiled" if job.compile else job.framework.value]
    c = consts["activation"][kind]
    fr = c["frozen"]
    per = fr["h"] * h + fr["h_kv"] * kv + fr["intermediate"] * inter
    if job.method is Method.full:
        per += c["trainable_extra"]["h"] * h + c["trainable_extra"]["intermediate"] * inter
    else:
        per += _lora_saved_inputs(job) + kbit_saved_inputs(job, consts)
    return per / cfg.tp.astype(np.float64) + attention_core_bytes_per_token_layer(job, cfg, consts)


def attention_core_bytes_per_token_layer(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """What the attention core alone saves for backward, per token and layer (bytes, float (n,)).

    The fp32 log-sum-exp per head of flash/SDPA attention, 4a, plus for eager attention the s x s scores, 6 a s;
    divided by t. Its inputs (q, k, v after RoPE) and its output (the o projection's input) are counted with the
    layer (:func:`activation_bytes_per_token_layer`): Megatron-Core's selective checkpointing of the core
    (``recompute_granularity: selective``, module core_attn) saves the inputs and drops only this.
    """
    a = job.arch
    core = 4.0 * a.heads
    if job.attention is Attention.eager:
        core += float(consts["eager_scores_bytes_per_head_token"]) * a.heads * job.seq_len
    return np.full(len(cfg), core) / cfg.tp.astype(np.float64)


_INPUT_GROUPS = (  # the block Linears that share one input tensor: (names, input width key)
    ({"q_proj", "k_proj", "v_proj"}, "h"),
    ({"o_proj"}, "h"),
    ({"gate_proj", "up_proj"}, "h"),
    ({"down_proj"}, "intermediate"),
)


def _group_widths(job: Job) -> list[tuple[set[str], int]]:
    """The input groups of :data:`_INPUT_GROUPS` with their widths (h, or the active MLP width I)."""
    widths = {"h": job.arch.hidden, "intermediate": job.arch.active_width}
    return [(names, widths[key]) for names, key in _INPUT_GROUPS]



def quant_kernel(job: Job, consts: Mapping[str, Any]) -> str | None:
    """The library of the job's k-bit base Linears, or None where nothing names one.

    ``training.quant_kernel``, else the engine's calibration ``quant_kernel`` (bitsandbytes under hf, torchao under
    torchtune).
    """
    return job.quant_kernel or consts.get("quant_kernel", {}).get(job.framework.value)


def kbit_saved_inputs(job: Job, consts: Mapping[str, Any]) -> float:
    """Bytes per token per layer that a k-bit base's Linears save for backward beyond what is saved already.

    bitsandbytes before 0.43.2 ran its 4-bit matmul as an autograd function that kept its input A whenever any input
    needed a gradient (bitsandbytes/autograd/_functions.py ``MatMul4Bit.forward``: ``ctx.tensors = (A, B)``; PR #1270,
    2024-07-16, keeps ``(None, B)``), so each quantised Linear saved its 16-bit input although its weight is frozen,
    where a plain frozen Linear saves nothing. New tensors are the attention norm's output (input of q/k/v, 2h), the
    MLP norm's output (input of gate/up, 2h) and the SwiGLU product (input of down, 2I); o_proj's input is the
    attention output that flash/SDPA attention saves already (its (B, T, heads, d) layout makes the reshape a view),
    and a group whose LoRA adapters save the same input (:func:`_lora_saved_inputs`) adds nothing. Llama-2-7B with
    LoRA on q and v: 2 (h + I) = 2 (4096 + 11,008) = 30,208 B per token and layer. bitsandbytes 0.43.2 on and
    torchao's ``linear_nf4`` (torchtune) save only the quantised weight: 0. Kernel: ``training.quant_kernel``, else
    the engine's calibration ``quant_kernel``; those that save are calibration ``kbit_input_saving_kernels``. 0 for a
    16-bit base.
    """
    if job.base_bits >= 16:
        return 0.0
    if quant_kernel(job, consts) not in consts.get("kbit_input_saving_kernels", []):
        return 0.0
    t = _targets(job)
    fresh = [(names, width) for names, width in _group_widths(job) if "o_proj" not in names]
    return sum(2.0 * width for names, width in fresh if not names & t)


def _lora_saved_inputs(job: Job) -> float:
    """Bytes per token per layer that LoRA adapters save: their 16-bit inputs, plus dropout copies and masks."""
    a = job.arch
    h, inter = a.hidden, a.active_width
    t = _targets(job)
    saved = sum(2.0 * width for names, width in _group_widths(job) if names & t)  # 16-bit input, shared in a group
    if job.lora is not None and job.lora.dropout > 0:
        d_in = {"q_proj": h, "k_proj": h, "v_proj": h, "o_proj": h, "gate_proj": h, "up_proj": h, "down_proj": inter}
        saved += sum(3.0 * d_in[m] for m in t if m in d_in)  # 2 B dropped-out copy + 1 B mask per module
    return saved


def activation_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Activations held at the start of the backward pass for one micro-batch of T = s b tokens (bytes, (n,)).

    none: T x L_loc x c_layer. full checkpointing: T x (2h/t x L_loc + c_layer), the 16-bit layer inputs plus one
    layer being recomputed (Korthikanti section 4.1; formulas.md section 4.4). selective, by what the engine
    recomputes (``job.selective_recompute``, calibration timing ``selective_recompute``): every_other_matmul
    (PyTorch per-op selective as torchtitan applies it, the hf engine): T x (f x c_layer x L_loc + (1 - f) x
    c_layer), keeping a fraction f = ``selective_keep_fraction`` of each layer (the attention outputs and every
    other matmul output) and recomputing the rest of one layer; attention_core (Megatron-Core's selective, nemo):
    T x ((c_layer - c_core) x L_loc + c_core), every layer's tensors but its attention core's
    (:func:`attention_core_bytes_per_token_layer`: with flash attention only the log-sum-exp, so nearly none's
    figure; with eager attention the s x s scores, Korthikanti's 5as).
    With 1F1B pipelining the first stage holds min(p, GA) micro-batches of L/p layers (Narayanan et al. 2021); the
    interleaved schedule with v chunks per stage (optimizer/models/pipeline.py) holds 1 + (p - 1) / (p v) times
    that (Korthikanti et al. 2022, arXiv 2205.05198, section 4.2.3).
    Activation offloading (``training.activation_offload``; torchtune OffloadActivations, formulas.md section 4.4
    "moves the saved inputs to the CPU") keeps only the layer being computed on the GPU, T x c_layer, whatever the
    checkpointing; the rest lives in pinned host RAM (the prefetched next layer's inputs, 2hT, are neglected).
    Llama-3.2-3B at 8192 tokens with full checkpointing: 2h L T = 1.31 GiB moved, the "about 1.3 GiB" of the
    torchtune ladder's notes.
    """
    tokens = _f(cfg.micro_batch * job.seq_len)
    layers_local = job.arch.layers / _f(cfg.pp) * _f(np.minimum(cfg.pp, np.maximum(cfg.grad_accum, 1)))
    v = _f(pipeline_chunks(job, cfg))
    layers_local = layers_local * np.where(v > 1, 1.0 + (cfg.pp - 1) / (cfg.pp * v), 1.0)
    per_layer = activation_bytes_per_token_layer(job, cfg, consts)
    keep_input = 2.0 * job.arch.hidden / _f(cfg.tp)
    frac = float(consts["selective_keep_fraction"])
    none = tokens * layers_local * per_layer
    full = tokens * (keep_input * layers_local + per_layer)
    if job.selective_recompute == "attention_core":
        core = attention_core_bytes_per_token_layer(job, cfg, consts)
        sel = tokens * ((per_layer - core) * layers_local + core)
    else:
        sel = tokens * (frac * per_layer * layers_local + (1.0 - frac) * per_layer)
    if job.activation_offload:
        return _i64(np.broadcast_to(tokens * per_layer, (len(cfg),)))
    return _i64(np.select([cfg.checkpointing == _CK_NONE, cfg.checkpointing == _CK_SEL], [none, sel], full))


def loss_kind(job: Job, consts: Mapping[str, Any]) -> str:
    """The key of ``logits_bytes_per_vocab_token`` the job's loss uses.

    ``auto`` takes the framework default (``default_loss``). ``standard`` is read per framework: eager
    (``standard_loss_kind``: ``standard``, the fp32-upcast cross-entropy of transformers, torchtune and torchtitan;
    ``megatron`` for nemo) or under ``training.compile`` (``compiled_loss_kind``): ``standard_compiled`` where the
    upcast is inside the compiled graph (transformers computes the loss inside the compiled model's forward since
    4.46; torchtitan compiles ``cross_entropy_loss`` with its ``.float()`` from 2025,
    torchtitan/components/loss.py build_cross_entropy_loss), ``standard`` for torchtune, whose compile_loss receives
    logits the eager model already upcast (the Llama-3.2-3B ladder's "+ Compile" rung drops 9.0 GiB, what the fused
    layers alone account for, 8.75 GiB: no saving of the compiled loss is visible). ``standard_16bit`` is a
    cross-entropy on 16-bit logits (Qwen-1's remote modelling code), ``standard_16bit_held`` the same with the
    logits held through backward (KempnerForge), ``standard_held`` the fp32 one with the logits held through
    backward (torchtune before July 2024); a chunked loss under compile is
    ``chunked_compiled`` (torchtune compile_loss compiles the per-chunk upcast + cross-entropy only).
    """
    loss = job.loss
    if loss is Loss.auto:
        loss = Loss(consts["default_loss"][job.framework.value])
    if loss is Loss.standard:
        table = "compiled_loss_kind" if job.compile else "standard_loss_kind"
        return consts[table][job.framework.value]
    if loss is Loss.chunked and job.compile:
        return "chunked_compiled"
    return loss.value


def logits_bytes(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Output-layer logits and cross-entropy buffers at their peak: T x V x c_loss / t (bytes, (n,)).

    c_loss (calibration ``logits_bytes_per_vocab_token``, key from :func:`loss_kind`) is the larger of the loss
    path's two moments, both of which coincide with every activation of the micro-batch being alive: the end of
    the forward pass and the start of the backward pass. Counted per logit (one vocabulary entry of one token)
    from the tensors autograd and the caller hold, not fitted:

    standard (12): transformers' ``ForCausalLMLoss`` (src/transformers/loss/loss_utils.py, 4.46 to 5.x: "logits =
    logits.float()" then ``nn.functional.cross_entropy``; before 4.46 the same ``logits.float()`` sat in
    ``LlamaForCausalLM.forward``), torchtitan (``cross_entropy_loss``: ``pred.flatten(0, 1).float()``) and torchtune
    (TransformerDecoder returns ``self.output(h).float()``). Forward end: bf16 logits 2 + fp32 upcast 4 + fp32
    log-softmax output 4 = 10 (14 in transformers 4.46-4.47, whose loss also made a shifted fp32 copy,
    ``logits[..., :-1, :].contiguous()``). Backward start: the caller has dropped the model output (Trainer's
    compute_loss returns only the loss; torchtitan ``del pred``) and the upcast (its backward saves no tensor), so
    what is live is the saved fp32 log-softmax 4 + the fp32 gradient nll_loss hands to it 4 + the fp32 gradient
    log_softmax_backward returns 4 = 12. Peak 12.
    standard_held (16): standard in a loop that still holds the (shifted, fp32) logits when backward starts: + 4
    (torchtune recipes until PR #1235, 2024-07-28, which added ``del logits`` "otherwise it peaks backward memory").
    standard_16bit (6): a cross-entropy on 16-bit logits with a shifted copy (Qwen-1's modeling_qwen.py,
    ``shift_logits = lm_logits[..., :-1, :].contiguous()`` then ``CrossEntropyLoss``, no upcast; DeepSpeed runs no
    autocast): forward 2 + 2 + 2 (logits, shifted copy, log-softmax), backward 2 + 2 + 2 (saved log-softmax, the two
    gradients) = 6.
    standard_16bit_held (8): a cross-entropy on 16-bit logits that the loop keeps through backward
    (KempnerForge@01b461a: Transformer.forward returns bf16 logits, scripts/train.py runs ``F.cross_entropy`` on them
    and its ``logits`` stays alive through ``backward()``; labels arrive shifted): forward 2 + 2 (logits, saved
    log-softmax), backward 2 + 2 + 2 + 2 (held logits, saved log-softmax, the two gradients) = 8.
    standard_compiled (4): the upcast and cross-entropy in one compiled graph; Inductor fuses upcast, log-softmax
    and nll_loss, saves its bf16 input (2) and per-token statistics, and writes the bf16 gradient (2) in one fused
    backward kernel: 2 + 2 = 4.
    megatron (6): nemo's vocabulary-parallel loss, the former fitted bf16 value, not re-derived (no nemo memory case).
    chunked (6.5) and chunked_compiled (2.25): torchtune ``CEWithChunkedOutputLoss`` (8 chunks) eager: bf16 logits 2
    + every chunk's saved fp32 log-softmax 4 + the chunk being upcast 4/8; compiled (compile_loss compiles the
    per-chunk upcast + cross-entropy: "we only compile the upcast + cross-entropy calculation, not the chunking",
    torchtune/training/_compile.py): the bf16 logits 2 + one chunk's bf16 gradient 2/8. fused (0.5): Liger / CCE
    fused linear-cross-entropy, about 0. With tensor parallelism the divisor is :func:`logits_split`: t where the
    loss runs on vocabulary-sharded logits, 1 where the output layer all-gathers them first.
    """
    tokens = _f(cfg.micro_batch * job.seq_len)
    per_logit = float(consts["logits_bytes_per_vocab_token"][loss_kind(job, consts)])
    return _i64(tokens * job.arch.vocab * per_logit / logits_split(job, cfg, consts))


def vocab_parallel_loss(job: Job, consts: Mapping[str, Any]) -> bool:
    """Whether the loss runs on logits sharded over the vocabulary under tensor parallelism.

    ``training.loss_parallel`` when the scenario sets it, else the engine's default (calibration
    ``vocab_parallel_loss``, the engines listed there). Sharded: Megatron's vocabulary-parallel cross-entropy
    (nemo), torchtitan's ``loss_parallel`` context (on whenever tp > 1 unless ``--training.disable_loss_parallel``;
    its output layer is ``ColwiseParallel(output_layouts=Shard(-1), use_local_output=not loss_parallel)``).
    Gathered: a ``ColwiseParallel(output_layouts=Replicate())`` output layer, which all-gathers every rank's
    vocabulary slice into the full logits before the loss: torchtune's tensor-parallel plans
    (torchtune/models/llama3/_parallelism.py ``BASE_LLAMA_TP_PLAN`` "output") and KempnerForge
    (kempnerforge/distributed/tensor_parallel.py@01b461a "Output head: split vocab dim, gather to Replicate for
    loss computation"), followed by a plain ``F.cross_entropy``.
    """
    if job.loss_parallel is not None:
        return job.loss_parallel
    return job.framework.value in consts.get("vocab_parallel_loss", [])


def logits_split(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Divisor of the loss path's bytes per rank (float (n,)): t with a vocabulary-parallel loss, else 1.

    With gathered logits every tensor-parallel rank holds the full T x V logits and runs the whole loss on them;
    the rank's own T x V / t slice (the local matmul output) is freed once gathered, and its gradient is a slice
    of the full one, so neither is counted.
    """
    return _f(cfg.tp) if vocab_parallel_loss(job, consts) else np.ones(len(cfg))
