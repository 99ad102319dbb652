"""Step time, throughput and wall-clock hours of a training job, as pure vectorised functions.

Per micro-batch on one GPU (seconds, arrays of shape (n,)):

    compute = T / (t p) x (F_dense / (peak_prec x f_prec) + F_attn / peak_attn) / eta  (+ fp8 casts)
    eta     = eta_arch x f_engine x f_method x M / (M + M_half) x W / (W + W_half),  M = b s, W = h / t
    dequant = passes x P_q / (t p) x B_dq / HBM                               # QLoRA NF4 -> bf16, memory-bound
    micro   = compute + dequant + (1 - o_tp) x tp_comm + max(0, zero_comm + host - overlap x compute) + pp_p2p
    host    = 2 P_local / PCIe (gradients out, offload) + 2 B_w P / (t p d) / PCIe (parameters in, offload all)
    step    = m x micro x (1 + (p - 1) / (v m)) + max(0, dp_sync - overlap x compute) + optimizer
    hours   = steps x step / 3600 + checkpoint saves + startup

with T = b s tokens per micro-batch, m = grad_accum micro-batches per step, t/p/d the tensor, pipeline and data
degrees, v interleaved chunks per stage. The GEMM rows M are the micro-batch's tokens whatever t is: a tensor-parallel
shard narrows the weight (W), not the activations. Collectives (volumes, bandwidths, ring latency terms) are in
optimizer/models/comm.py.

Sources: FLOPs per token 6N (+ attention 12 L h s) from the PaLM paper appendix B (arXiv 2204.02311) and Kaplan et
al. 2020; frozen-base LoRA 4N and the recomputed forward +2N + 4 L h s (formulas.md Part II section 3.1); exposed
communication and the optimizer/offload terms (section 3.3); 1F1B and interleaved bubbles (p-1)/(v m) from Narayanan
et al. 2021 (arXiv 2104.04473). Constants live in ``catalogs/calibration.yaml`` (section ``timing``), fitted and
validated source by source with ``python bench/loso.py`` (docs/time-model.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optimizer.inputs.schema import (
    Attention,
    Checkpointing,
    Framework,
    Method,
    Offload,
    OptimizerName,
    Precision,
    Sharding,
)
from optimizer.models import comm
from optimizer.models.configs import CHECKPOINTING, OFFLOAD, OPTIMIZER, PRECISION, Configs, Hardware, Job, row_tokens
from optimizer.models.memory import quantized_params, trainable_params
from optimizer.models.pipeline import pipeline_chunks

_CK_NONE, _CK_SEL, _CK_FULL = (CHECKPOINTING.index(c) for c in Checkpointing)
_NONE, _OPT, _ALL = (OFFLOAD.index(o) for o in Offload)
_FP8 = PRECISION.index(Precision.fp8)
_ADAMW = OPTIMIZER.index(OptimizerName.adamw)
dp_bandwidth = comm.dp_bandwidth  # data-parallel ring bandwidth, kept here for callers of timing


def matmul_params(job: Job) -> float:
    """Parameters that take part in matrix multiplies per token: active block weights plus the output layer.

    N = active params - input embedding when the embeddings are untied (a lookup is free; the output layer, tied
    or not, is a GEMM). Unit: parameters. Source: formulas.md Part II section 3.1 ("use non-embedding N").
    """
    a = job.arch
    return float(a.active_params - a.vocab * a.hidden * (0 if a.tied_embeddings else 1))


def model_flops_per_token(job: Job, seq: float | np.ndarray | None = None) -> float | np.ndarray:
    """Model FLOPs per trained token, without recomputation (the MFU numerator), FLOP/token.

    full: 6N + 12 L h s; LoRA/QLoRA (frozen base, no weight-gradient GEMMs): 4N + 12 L h s. The attention term
    counts QK^T and AV forward and backward without causal halving (PaLM appendix B convention, also llm-foundry's
    "Model TFLOP" column: 3 x 2 x 2 x L h s per token).
    """
    a = job.arch
    attn = 12.0 * a.layers * a.hidden * (job.seq_len if seq is None else seq)  # QK^T and AV, fwd + 2 x bwd
    dense = (6.0 if job.method is Method.full else 4.0) * matmul_params(job)  # 2N fwd + 2N dX (+ 2N dW)
    return dense + attn


def every_other_matmul_flops(job: Job) -> float:
    """Forward FLOPs per token of the matmuls per-op selective checkpointing recomputes, FLOP/token.

    torchtitan's op policy (pytorch/torchtitan parallelize_llama.py, ``_get_custom_policy``) saves the output of every
    compute op of a block except every second matmul: of the block's projections in forward order q, k, v, o, gate
    (w1), up (w3), down (w2) it recomputes k, o and up, 2 L (h h_kv + h_q h + h I) with I the active MLP width.
    """
    a = job.arch
    return 2.0 * a.layers * a.hidden * (a.kv_width + a.q_width + a.active_width)


def flops_per_token_parts(job: Job, cfg: Configs,
                          selective: str = "attention_core") -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Executed FLOPs per token split into (dense GEMMs, attention core), (n,) each, recomputation included.

    dense: 6N (full) or 4N (frozen base), + 2N with full recomputation; attention: 12 L h s, + 4 L h s with full
    recomputation. Selective recomputation depends on the engine (``selective_recompute``): ``attention_core``
    recomputes the attention core only, + 4 L h s (Megatron; Korthikanti et al. 2022, arXiv 2205.05198, section 5;
    llm-foundry HFU = 4/3 MFU); ``every_other_matmul`` (torchtitan's per-op policy) keeps the SDPA output and
    recomputes every second matmul of each block, + :func:`every_other_matmul_flops` dense and no attention.
    """
    a = job.arch
    n = matmul_params(job)
    fwd_attn = 4.0 * a.layers * a.hidden * row_tokens(job, cfg)
    op_policy = selective == "every_other_matmul"
    sel_dense = every_other_matmul_flops(job) if op_policy else 0.0
    full, sel = cfg.checkpointing == _CK_FULL, cfg.checkpointing == _CK_SEL
    recompute_dense = np.select([full, sel], [2.0 * n, sel_dense], 0.0)
    dense = (6.0 if job.method is Method.full else 4.0) * n + recompute_dense
    attn_recomputed = full | (sel & (not op_policy))
    attn = 3.0 * fwd_attn + np.where(attn_recomputed, fwd_attn, 0.0)
    return dense, attn


def selective_recompute(job: Job, consts: Mapping[str, Any]) -> str:
    """What the job's engine recomputes under selective checkpointing (:func:`recompute_policy`)."""
    return recompute_policy(job.framework.value, consts)


def recompute_policy(framework: str, consts: Mapping[str, Any]) -> str:
    """What ``framework``'s selective checkpointing recomputes (``selective_recompute``); default the attention core.

    The one reading of the calibration entry: the time model prices it and the Job carries it to the memory model
    (space.make_job, validator.job_of).
    """
    return str(consts.get("selective_recompute", {}).get(framework, "attention_core"))


def executed_attention_share(job: Job, consts: Mapping[str, Any]) -> float:
    """Share of the counted attention FLOPs a causal kernel executes.

    flash/sdpa skip the blocks above the diagonal (``causal_attention_share``, FlashAttention-2, Dao 2023, arXiv
    2307.08691 section 3.1); eager computes the full s x s scores and masks them (1).
    """
    return 1.0 if job.attention is Attention.eager else float(consts["causal_attention_share"])


def hardware_flops_per_token(job: Job, cfg: Configs, selective: str = "attention_core") -> np.ndarray:
    """Hardware FLOPs per token, (n,): model FLOPs plus recomputation (:func:`flops_per_token_parts`).

    Attention is counted in full, as MFU counts it (Megatron-LM and llm-foundry report HFU so); a causal kernel
    executes about half of it (:func:`executed_attention_share`).
    """
    dense, attn = flops_per_token_parts(job, cfg, selective)
    return dense + attn


def gemm_fill(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """How well one rank's GEMMs fill the GPU, (n,), dimensionless in (0, 1).

    A tensor-parallel shard multiplies the same M = b s rows by a weight whose output (column-parallel) or input
    (row-parallel) width is split by t (Shoeybi et al. 2019, arXiv 1909.08053 section 3): M does not shrink, the
    narrow dimension does. fill = M / (M + M_half) x W / (W + W_half), W = h / t the narrowest per-shard width
    (attention output projection); M_half and W_half (``saturation_tokens``, ``saturation_width``) are the sizes at
    which a GEMM reaches half its plateau (tile and wave quantisation: a 128 x 256 tile per SM on Hopper, cuBLAS).
    """
    rows = cfg.micro_batch * row_tokens(job, cfg)
    width = job.arch.hidden / cfg.tp.astype(np.float64)
    m_half, w_half = float(consts["saturation_tokens"]), float(consts["saturation_width"])
    return rows / (rows + m_half) * width / (width + w_half)


def compute_efficiency(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Fraction of the bf16-class dense peak reached by the GEMM-bound work, (n,), dimensionless.

    eta = eta_arch x f_engine x f_method x fill, with fill from :func:`gemm_fill`. eta_arch is fitted per GPU
    architecture (hw.efficiency), f_engine per training stack (``framework_factor``: kernels of eager HF,
    torchtune, Megatron/Transformer Engine) and f_method per stack and method (``method_factor``), all in
    calibration.yaml ``timing`` (bench/loso.py fits them, leaving each source out in turn).
    """
    framework = float(consts["framework_factor"][job.framework.value])
    method = float(consts["method_factor"][job.framework.value][job.method.value])
    return hw.efficiency * framework * method * gemm_fill(job, cfg, consts)


def attention_efficiency(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Fraction of the bf16 peak reached by the attention kernels, (n,).

    Engines listed in ``fused_attention_engines`` (Megatron-Core with Transformer Engine: cuDNN fused attention)
    run FlashAttention-3-class kernels, the others PyTorch SDPA / flash-attn 2 kernels (catalog figures per GPU
    architecture, ``attention_efficiency``, via space.hardware). Where the catalog has no figure the GEMM
    efficiency stands in. A fused engine without its own figure uses the FlashAttention-2 one.
    """
    eta = compute_efficiency(job, cfg, hw, consts)
    fa2 = np.where(np.isnan(hw.attention_efficiency), eta, hw.attention_efficiency)
    if job.framework.value in consts.get("fused_attention_engines", []):
        return np.where(np.isnan(hw.fused_attention_efficiency), fa2, hw.fused_attention_efficiency)
    return fa2


def compute_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """GEMM-bound seconds of one micro-batch on one GPU, (n,).

    T / (t p) x [F_dense / (peak_prec x f_prec x eta) + c F_attn / (peak_attn x eta_attn)] + fp8 casts.
    Low-precision recipes (Transformer Engine, torchao float8) run only the Linear layers in fp8; attention
    (flash/cuDNN) stays in bf16, so it runs at the bf16 peak (``peak_attn``) and at the attention kernels'
    efficiency eta_attn (:func:`attention_efficiency`); c is the executed share of the counted attention FLOPs
    (:func:`executed_attention_share`). f_prec (``precision_factor``) is the share of the fp8 peak fp8 GEMMs reach
    relative to bf16 GEMMs' share of theirs: 0.709 / 0.803 = 0.883 on H100 (maximum achievable matmul FLOPS,
    formulas.md Part II section 1.2). Before its fp8 GEMMs each Linear scales and casts its input twice (X for the
    forward, X^T for the weight gradient) and its output gradient once: ``fp8_cast_bytes`` per element (amax read
    2 B, cast read 2 B and write 1 B, dynamic tensorwise scaling) over 2 x in + out features per token and layer,
    / t, at HBM bandwidth.
    """
    a = job.arch
    tokens = cfg.micro_batch * row_tokens(job, cfg)
    split = (cfg.tp * cfg.pp).astype(np.float64)
    dense, attn = flops_per_token_parts(job, cfg, selective_recompute(job, consts))
    by_precision = np.array([float(consts["precision_factor"][p.value]) for p in PRECISION])
    eta = compute_efficiency(job, cfg, hw, consts)
    fp8 = cfg.precision == _FP8
    attn_peak = np.where(fp8, hw.bf16_flops, hw.peak_flops)
    attn = attn * executed_attention_share(job, consts)
    seconds = tokens / split * (dense / (hw.peak_flops * by_precision[cfg.precision] * eta)
                                + attn / (attn_peak * attention_efficiency(job, cfg, hw, consts)))  # fmt: skip
    kv, inter = 2 * a.kv_width, a.active_width
    # 2 x in + out per Linear: q, o 3h each; k, v 2h + kv each; gate, up 2h + I each; down 2I + h
    features = a.layers * (15 * a.hidden + kv + 4 * inter)
    cast = float(consts["fp8_cast_bytes"]) * features * tokens / split / hw.hbm_bytes_per_s
    return seconds + np.where(fp8, cast, 0.0)


def dequant_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """QLoRA/8-bit base: seconds per micro-batch to dequantise the frozen Linear weights to bf16, (n,).

    passes x P_lin / (t p) x B_dq / HBM, with passes = 2 (forward, backward) + 1 with full recomputation, P_lin the
    quantised block Linear parameters (memory.quantized_params), B_dq bytes moved per parameter (read the packed
    weight and its constants, write the bf16 copy; calibration ``dequant_bytes_per_param``) and HBM in bytes/s.
    Memory-bound and per micro-batch, so its share shrinks as b s grows (formulas.md Part II section 3.1, "QLoRA").
    """
    if job.base_bits >= 16 or job.method is Method.full:
        return np.zeros(len(cfg))
    passes = np.where(cfg.checkpointing == _CK_FULL, 3.0, 2.0)
    per_gpu = quantized_params(job) / (cfg.tp * cfg.pp).astype(np.float64)
    return passes * per_gpu * float(consts["dequant_bytes_per_param"]) / hw.hbm_bytes_per_s


def comm_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Communication time before overlap, by kind (seconds, (n,) each): dp (per step), zero, tp, pp (per micro-batch).

    See optimizer/models/comm.py for the volumes, bandwidths and latency terms.
    """
    return {
        "dp": comm.dp_sync_seconds(job, cfg, hw, consts),
        "zero": comm.zero_seconds(job, cfg, hw, consts),
        "tp": comm.tp_seconds(job, cfg, hw, consts),
        "pp": comm.pp_seconds(job, cfg, hw, consts),
    }


def _optimizer_shard(job: Job, cfg: Configs) -> np.ndarray:
    """Trainable parameters whose optimizer state one rank keeps, (n,): P_train / (t p), / d under ZeRO >= 1."""
    split = (cfg.tp * cfg.pp).astype(np.float64)
    shard = np.where(cfg.zero_stage >= 1, cfg.shard_ranks, 1).astype(np.float64)
    return trainable_params(job) / split / shard


def kernel_traffic(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Memory traffic of the AdamW step's implementation relative to a fused kernel, (n,), dimensionless.

    n_kernel / n_fused from calibration ``optimizer_tensor_passes`` for rows that step torch AdamW, 1 otherwise.
    """
    passes = consts.get("optimizer_tensor_passes", {})
    known = job.optimizer_kernel in passes and "fused" in passes
    ratio = float(passes[job.optimizer_kernel]) / float(passes["fused"]) if known else 1.0
    return np.where(cfg.optimizer == _ADAMW, ratio, 1.0)


def optimizer_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Optimizer step and offload traffic per optimizer step, seconds, (n,).

    On the GPU: memory-bound, B_opt x k x P_local / HBM (B_opt bytes read and written per parameter by a fused
    AdamW kernel, formulas.md 3.3). k = n_kernel / n_fused (``optimizer_tensor_passes``) is how many more tensor
    reads and writes the scenario's AdamW implementation (``training.optimizer_kernel``) makes than the fused
    kernel: torch's default multi-tensor (foreach) AdamW runs one ``_foreach_*`` op per arithmetic step, each
    reading its operands and writing its result, 20 tensor passes against the fused kernel's 7 (p, g, m, v read;
    p, m, v written). Other optimizers (8-bit and paged AdamW, SGD, Adafactor) keep k = 1.
    Offloaded (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840):

        max(c_cpu x B_cpu / 28 x P_local x g, 2 P_local / PCIe)

    CPU Adam at c_cpu seconds per parameter for a whole node (the paper's Table 4: 2.57 s for 10B parameters on
    its DGX-2 host, two 24-core Xeon 8168), times the g ranks of the node that share its CPUs (g = GPUs of the job
    in the node); the updated 16-bit parameters go back host->GPU in tiles while Adam works on the next tile
    (section 5.1, Algorithm 1 line 15), so the upload hides behind the Adam step and the longer of the two counts.
    The step is memory-bound (10B parameters x 28 B in 2.57 s is ~110 GB/s of host memory traffic), so c_cpu
    scales with the bytes the engine's CPU step reads and writes per parameter, B_cpu / 28
    (``cpu_optimizer_bytes_per_param``: DeepSpeed/FSDP fp32 states 28, torchtune's pure-bf16 states 14).
    The one-step delayed update (DPU, section 5.2) is off by default in DeepSpeed and not modelled. Where torch's
    own AdamW steps on the CPU (FSDP CPU offload under hf or torchtune; DeepSpeed always runs its fused
    DeepSpeedCPUAdam) the same kernel ratio k applies: without ``fused`` torch steps CPU tensors one op per
    arithmetic step as well (its single-tensor path; foreach needs device tensors).
    P_local = P_train / (t p) / d when the optimizer is sharded (ZeRO >= 1), else / (t p).
    """
    local = _optimizer_shard(job, cfg)
    gpu = local * float(consts["optimizer_bytes_per_param"]) * kernel_traffic(job, cfg, consts) / hw.hbm_bytes_per_s
    sharing = np.minimum(cfg.cards, hw.cards_per_node).astype(np.float64)
    cpu_bytes = consts["cpu_optimizer_bytes_per_param"][job.framework.value]
    width = float(cpu_bytes) / float(consts["cpu_adam_bytes_per_param"])  # B_cpu / 28
    deepspeed = job.framework is Framework.hf and job.sharding is Sharding.deepspeed
    torch_step = 1.0 if deepspeed else kernel_traffic(job, cfg, consts)
    adam = local * float(consts["cpu_adam_seconds_per_param"]) * sharing * width * torch_step
    cpu = np.maximum(adam, 2.0 * local / hw.pcie_bytes_per_s)
    return np.where(cfg.offload == _NONE, gpu, cpu)


def grad_offload_seconds(job: Job, cfg: Configs, hw: Hardware) -> np.ndarray:
    """Offload 'optimizer' or 'all': seconds per micro-batch to copy the rank's gradients GPU->host, (n,).

    2 B x P_local / PCIe every micro-batch: DeepSpeed ZeRO-1/2 copies each reduced gradient bucket of the rank's
    partition to the host buffer as the backward produces it (stage_1_and_2.py, copy_grads_in_partition), ZeRO-3
    and FSDP CPU offload move the reduce-scattered shard to the host after each backward; 16-bit gradients (the
    paper's 2M gradient edge, section 3.3). P_local as in :func:`optimizer_seconds`.
    """
    return np.where(cfg.offload == _NONE, 0.0, 2.0 * _optimizer_shard(job, cfg) / hw.pcie_bytes_per_s)


def param_offload_seconds(job: Job, cfg: Configs, hw: Hardware) -> np.ndarray:
    """Offload 'all': seconds per micro-batch to stream the parameters from the host, (n,).

    The rank's parameter shard crosses PCIe host->GPU for the forward and for the backward of every micro-batch:
    2 x B_w x P / (t p d) / PCIe, with B_w the stored width of the weights (2 B, or 0.5 B for an NF4 base) (FSDP
    CPUOffload, ZeRO-3 offload_param; formulas.md Part II 3.3). Both engines copy a layer's shard in on the
    prefetch path ahead of its all-gather, so :func:`step_seconds` queues it with the ZeRO collectives.
    """
    base_bytes = 2.0 if job.base_bits == 16 else job.base_bits / 8.0
    local = job.arch.total_params / (cfg.tp * cfg.pp * cfg.shard_ranks).astype(np.float64)
    return np.where(cfg.offload == _ALL, 2.0 * base_bytes * local / hw.pcie_bytes_per_s, 0.0)


def bubble_fraction(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """Pipeline bubble as a fraction of the m micro-batches' time, (n,): (p - 1) / (v m).

    1F1B (v = 1) idles p - 1 micro-batch slots per step; the interleaved schedule with v model chunks per stage
    divides that by v (Narayanan et al. 2021, arXiv 2104.04473, sections 2.2.1-2.2.2); v from
    :func:`pipeline_chunks`.
    """
    v = pipeline_chunks(job, cfg).astype(np.float64)
    m = np.maximum(cfg.grad_accum, 1).astype(np.float64)
    return (cfg.pp - 1) / (v * m)


def pipeline_p2p_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any],
                         hidden: np.ndarray) -> np.ndarray:  # fmt: skip
    """Exposed pipeline point-to-point time of one micro-batch, seconds, (n,).

    The interleaved schedule crosses v x as many stage boundaries, so it sends v x the bytes (Narayanan et al.
    2021 section 2.2.2: "the amount of communication also increases by v"). Megatron overlaps those sends with the
    next chunk's compute, and only under the interleaved schedule (``overlap_p2p_comm``, on by default; forced off
    for 1F1B in megatron/training/arguments.py): behind at most ``comm_overlap`` of the compute, like every
    collective here. Plain 1F1B sends on the critical path.
    """
    v = pipeline_chunks(job, cfg).astype(np.float64)
    sends = comm.pp_seconds(job, cfg, hw, consts) * v
    return np.where(v > 1, np.maximum(0.0, sends - hidden), sends)


def step_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Seconds per optimizer step, (n,); see the module docstring for the formula.

    Offloading adds, per micro-batch, the gradient copy GPU->host and (offload all) the parameter fetch
    host->GPU; they queue with the ZeRO collectives and hide behind the same share of compute.
    Overlap: a collective hides only behind compute that runs at the same time, so at most ``comm_overlap`` x the
    compute of the micro-batch it belongs to (ZeRO-3 gathers every micro-batch, so a small micro-batch exposes
    them); the data-parallel all-reduce hides behind the last micro-batch's backward only. Tensor-parallel
    collectives sit between dependent GEMMs; engines that overlap them with GEMM chunks (Megatron/Transformer
    Engine ``tp_comm_overlap``) hide ``tp_overlap`` of them.
    """
    compute = compute_seconds(job, cfg, hw, consts)
    comm_s = comm_seconds(job, cfg, hw, consts)
    hidden = float(consts["comm_overlap"]) * compute  # backward/forward work a collective can run behind
    # host traffic of offloading: gradients out and (offload all) parameters in, on the same side streams as the
    # ZeRO collectives (a bucket is reduced, then copied; a layer's shard is copied in, then gathered)
    host = grad_offload_seconds(job, cfg, hw) + param_offload_seconds(job, cfg, hw)
    tp_hidden = float(consts["tp_overlap"][job.framework.value])
    micro = (
        compute  # GEMM-bound work
        + dequant_seconds(job, cfg, hw, consts)  # NF4 dequantisation
        + (1.0 - tp_hidden) * comm_s["tp"]  # tensor-parallel collectives on the critical path
        + np.maximum(0.0, comm_s["zero"] + host - hidden)  # ZeRO-2/3 collectives and PCIe copies behind compute
        + pipeline_p2p_seconds(job, cfg, hw, consts, hidden)  # activations sent between pipeline stages
    )
    m = np.maximum(cfg.grad_accum, 1).astype(np.float64)
    # the last micro-batch's backward hides the reduce-scatter half; the parameter all-gather half hides behind the
    # next forward only on engines that overlap it (``param_gather_overlap``), else it follows the optimizer step
    half = 0.5 * comm_s["dp"]
    gather_hidden = hidden if job.framework.value in consts["param_gather_overlap"] else 0.0
    exposed_dp = np.where(
        cfg.zero_stage == 1,
        np.maximum(0.0, half - hidden) + np.maximum(0.0, half - gather_hidden),
        np.maximum(0.0, comm_s["dp"] - hidden),
    )
    return m * micro * (1.0 + bubble_fraction(job, cfg, consts)) + exposed_dp + optimizer_seconds(job, cfg, hw, consts)


def job_time(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """step_seconds, tokens_per_second, mfu, hfu, hours and pipeline_chunks of each configuration, (n,) each.

    tokens_per_second is the training rate (not tokens over the wall clock); hours include load and checkpoint
    saves; pipeline_chunks is the interleaved chunks per stage the plan launches with (:func:`pipeline_chunks`).

    tokens/s = global_batch x s / step; MFU = model FLOPs per token x tokens/s / (cards x dense bf16 peak);
    HFU = model FLOPs plus recomputation per token (attention in full, :func:`hardware_flops_per_token`) x tokens/s /
    (cards x dense peak of the configuration's precision), comparable across checkpointing choices (the efficiency
    ceiling of models/coverage.py compares it with published runs of the same cell and precision);
    hours = (steps x step + saves x c_save x 2 P / 1e9 + startup) / 3600, with a save every
    ``checkpoint_every_hours`` (scenario value, else calibration) plus the final one.
    """
    step = step_seconds(job, cfg, hw, consts)
    seq = row_tokens(job, cfg)
    tps = job.global_batch * seq / step
    cards = (cfg.tp * cfg.pp * cfg.dp).astype(np.float64)
    mfu = model_flops_per_token(job, seq) * tps / (cards * hw.bf16_flops)
    hfu = hardware_flops_per_token(job, cfg, selective_recompute(job, consts)) * tps / (cards * hw.peak_flops)
    train_s = job.steps * step
    every_h = job.checkpoint_every_hours or float(consts["checkpoint_every_hours"])
    saves = np.floor(train_s / 3600.0 / every_h) + 1.0
    save_s = saves * float(consts["checkpoint_seconds_per_gb"]) * job.arch.total_params * 2.0 / 1e9
    hours = (train_s + save_s + float(consts["startup_seconds"])) / 3600.0
    chunks = pipeline_chunks(job, cfg)
    return {"step_seconds": step, "tokens_per_second": tps, "mfu": mfu, "hfu": hfu, "hours": hours,
            "pipeline_chunks": chunks}
