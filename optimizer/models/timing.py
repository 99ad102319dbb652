"""Step time, throughput and wall-clock hours of a training job, as pure vectorised functions.

Per micro-batch on one GPU (seconds, arrays of shape (n,)):

    compute = F_hw x T / (t p) / (peak_precision x eta)                       # GEMM-bound work
    dequant = passes x P_q / (t p) x B_dq / HBM                               # QLoRA NF4 -> bf16, memory-bound
    micro   = compute + dequant + tp_comm + max(0, zero_comm - overlap x compute)
    step    = m x micro x (1 + (p - 1) / m) + max(0, dp_sync - overlap x compute) + optimizer + offload
    hours   = steps x step / 3600 + checkpoint saves + startup

with T = b x s tokens per micro-batch, m = grad_accum micro-batches per step, t/p/d the tensor, pipeline and data
degrees, and eta = eta_arch x f_framework x f_method x f_precision x T_t / (T_t + T_half), T_t = T / t.

Sources: FLOPs per token 6N (+ attention 12 L h s) from the PaLM paper appendix B (arXiv 2204.02311) and Kaplan et
al. 2020; frozen-base LoRA 4N and the recomputed forward +2N + 4 L h s (formulas.md Part II section 3.1); ring
collective volumes 2(n-1)/n M (all-reduce) and (n-1)/n M (gather/scatter) from the NCCL-tests convention
(formulas.md Part II section 3.2); exposed communication and the optimizer/offload terms (section 3.3); 1F1B bubble
(p-1)/m from Narayanan et al. 2021 (arXiv 2104.04473). Efficiency, overlap and offload constants live in
``catalogs/calibration.yaml`` (section ``timing``) with the cases they were fitted to (docs/time-model.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optimizer.configs import CHECKPOINTING, OFFLOAD, PRECISION, Configs, Hardware, Job
from optimizer.models.memory import linear_params, trainable_params
from optimizer.schema import Checkpointing, Method, Offload

_CK_NONE, _CK_SEL, _CK_FULL = (CHECKPOINTING.index(c) for c in Checkpointing)
_NONE, _OPT, _ALL = (OFFLOAD.index(o) for o in Offload)


def matmul_params(job: Job) -> float:
    """Parameters that take part in matrix multiplies per token: active block weights plus the output layer.

    N = active params - input embedding when the embeddings are untied (a lookup is free; the output layer, tied
    or not, is a GEMM). Unit: parameters. Source: formulas.md Part II section 3.1 ("use non-embedding N").
    """
    a = job.arch
    return float(a.active_params - a.vocab * a.hidden * (0 if a.tied_embeddings else 1))


def model_flops_per_token(job: Job) -> float:
    """Model FLOPs per trained token, without recomputation (the MFU numerator), FLOP/token.

    full: 6N + 12 L h s; LoRA/QLoRA (frozen base, no weight-gradient GEMMs): 4N + 12 L h s. The attention term
    counts QK^T and AV forward and backward without causal halving (PaLM appendix B convention, also llm-foundry's
    "Model TFLOP" column: 3 x 2 x 2 x L h s per token).
    """
    a = job.arch
    attn = 12.0 * a.layers * a.hidden * job.seq_len  # QK^T and AV, fwd + 2 x bwd
    dense = (6.0 if job.method is Method.full else 4.0) * matmul_params(job)  # 2N fwd + 2N dX (+ 2N dW)
    return dense + attn


def hardware_flops_per_token(job: Job, cfg: Configs) -> np.ndarray:
    """FLOPs executed per token, (n,): model FLOPs plus recomputation.

    full checkpointing repeats the forward: + 2N + 4 L h s; selective recomputes the attention core only:
    + 4 L h s (Korthikanti et al. 2022, arXiv 2205.05198, section 5; llm-foundry HFU = 4/3 MFU).
    """
    a = job.arch
    fwd_attn = 4.0 * a.layers * a.hidden * job.seq_len
    extra = np.select(
        [cfg.checkpointing == _CK_FULL, cfg.checkpointing == _CK_SEL],
        [2.0 * matmul_params(job) + fwd_attn, fwd_attn],
        0.0,
    )
    return model_flops_per_token(job) + extra


def compute_efficiency(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Fraction of the precision's dense peak reached by the GEMM-bound work, (n,), dimensionless.

    eta = eta_arch x f_framework x f_method x f_precision x T_t / (T_t + T_half), with T_t = b s / t the tokens of
    one tensor-parallel shard's micro-batch: small micro-batches underfill the GPU. eta_arch is fitted per GPU
    architecture (hw.efficiency); the factors and T_half (tokens) come from calibration.yaml ``timing``.
    """
    tokens = cfg.micro_batch * job.seq_len / cfg.tp
    t_half = float(consts["saturation_tokens"])
    framework = float(consts["framework_factor"][job.framework.value])
    method = float(consts["method_factor"][job.framework.value][job.method.value])
    by_precision = np.array([float(consts["precision_factor"][p.value]) for p in PRECISION])
    return hw.efficiency * framework * method * by_precision[cfg.precision] * tokens / (tokens + t_half)


def dequant_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """QLoRA/8-bit base: seconds per micro-batch to dequantise the frozen Linear weights to bf16, (n,).

    passes x P_lin / (t p) x B_dq / HBM, with passes = 2 (forward, backward) + 1 with full recomputation, P_lin the
    block Linear parameters, B_dq bytes moved per parameter (read the packed weight and its constants, write the
    bf16 copy; calibration ``dequant_bytes_per_param``) and HBM in bytes/s. Memory-bound and per micro-batch, so
    its share shrinks as b s grows (formulas.md Part II section 3.1, "QLoRA").
    """
    if job.base_bits >= 16 or job.method is Method.full:
        return np.zeros(len(cfg))
    passes = np.where(cfg.checkpointing == _CK_FULL, 3.0, 2.0)
    per_gpu = linear_params(job) / (cfg.tp * cfg.pp).astype(np.float64)
    return passes * per_gpu * float(consts["dequant_bytes_per_param"]) / hw.hbm_bytes_per_s


def _ring(n: np.ndarray, factor: float) -> np.ndarray:
    """Ring collective volume factor: factor x (n-1)/n, 0 for a single rank (NCCL-tests busbw convention)."""
    n = n.astype(np.float64)
    return np.where(n > 1, factor * (n - 1) / n, 0.0)


def dp_bandwidth(cfg: Configs, hw: Hardware) -> np.ndarray:
    """Bytes/s per GPU for data-parallel collectives, (n,).

    The slower of the intra-node link and, across nodes, the ring's inter-node bandwidth (space.hardware gives both).
    """
    return np.where(hw.nodes > 1, np.minimum(hw.intra_bytes_per_s, hw.inter_bytes_per_s), hw.intra_bytes_per_s)


def comm_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Communication time before overlap, by kind (seconds, (n,) each).

    dp (once per step; stages 0-1): ring all-reduce of 2-byte gradients of the trainable parameters,
    2 (d-1)/d x 2 P_train / (t p) bytes. zero (per micro-batch): stages 2-3 reduce-scatter those gradients every
    micro-batch, (d-1)/d x 2 P_train / (t p); stage 3 adds two all-gathers (forward, backward) of the base weights
    in their stored width, 2 (d-1)/d x B_w P / (t p). tp (per micro-batch): 4 all-reduces per layer of b s h 2 bytes
    (6 with full recomputation), ring over t GPUs in the NVLink domain (Shoeybi et al. 2019, arXiv 1909.08053).
    Volumes from formulas.md Part II section 3.2 (ZeRO-3 = 1.5 x DDP; LoRA + ZeRO-3 gathers the frozen base).
    """
    a = job.arch
    split = (cfg.tp * cfg.pp).astype(np.float64)
    bw = dp_bandwidth(cfg, hw)
    grads = 2.0 * trainable_params(job) / split  # bytes of 16-bit gradients per model-parallel shard
    base_bytes = 2.0 if job.base_bits == 16 else job.base_bits / 8.0
    dp = np.where(cfg.zero_stage >= 2, 0.0, _ring(cfg.dp, 2.0) * grads / bw)
    scatter = np.where(cfg.zero_stage >= 2, _ring(cfg.dp, 1.0) * grads / bw, 0.0)
    gather = np.where(cfg.zero_stage >= 3, _ring(cfg.dp, 2.0) * base_bytes * a.total_params / split / bw, 0.0)
    per_layer = np.where(cfg.checkpointing == _CK_FULL, 6.0, 4.0)
    tp_bytes = per_layer * (a.layers / cfg.pp) * cfg.micro_batch * job.seq_len * a.hidden * 2.0
    tp = _ring(cfg.tp, 2.0) * tp_bytes / hw.tp_bytes_per_s
    return {"dp": dp, "zero": scatter + gather, "tp": tp}


def optimizer_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Optimizer step and offload traffic per optimizer step, seconds, (n,).

    On the GPU: memory-bound, B_opt x P_local / HBM (B_opt bytes read and written per parameter, formulas.md 3.3).
    Offloaded (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840): CPU Adam at c_cpu seconds per parameter on the
    rank's shard, times the ranks of a node that share its CPU (g = GPUs of the job in the node), plus the upload
    of the updated 16-bit parameters, 2 P_local / PCIe; the gradient download overlaps the backward pass (the
    paper's single-GPU schedule, section 4.1). P_local = P_train / (t p) / d when the optimizer is sharded
    (ZeRO >= 1), else / (t p).
    """
    split = (cfg.tp * cfg.pp).astype(np.float64)
    shard = np.where(cfg.zero_stage >= 1, cfg.dp, 1).astype(np.float64)
    local = trainable_params(job) / split / shard
    gpu = local * float(consts["optimizer_bytes_per_param"]) / hw.hbm_bytes_per_s
    sharing = np.minimum(cfg.cards, hw.cards_per_node).astype(np.float64)
    cpu = local * float(consts["cpu_adam_seconds_per_param"]) * sharing + 2.0 * local / hw.pcie_bytes_per_s
    return np.where(cfg.offload == _NONE, gpu, cpu)


def param_offload_seconds(job: Job, cfg: Configs, hw: Hardware) -> np.ndarray:
    """Offload 'all': seconds per micro-batch to stream the parameters from the host, (n,).

    The rank's parameter shard crosses PCIe host->GPU for the forward and for the backward of every micro-batch:
    2 x B_w x P / (t p d) / PCIe, with B_w the stored width of the weights (2 B, or 0.5 B for an NF4 base) (FSDP
    CPUOffload, ZeRO-3 offload_param; formulas.md Part II 3.3).
    """
    base_bytes = 2.0 if job.base_bits == 16 else job.base_bits / 8.0
    local = job.arch.total_params / (cfg.tp * cfg.pp * cfg.dp).astype(np.float64)
    return np.where(cfg.offload == _ALL, 2.0 * base_bytes * local / hw.pcie_bytes_per_s, 0.0)


def step_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Seconds per optimizer step, (n,); see the module docstring for the formula."""
    tokens_micro = (cfg.micro_batch * job.seq_len).astype(np.float64)
    flops_micro = hardware_flops_per_token(job, cfg) * tokens_micro / (cfg.tp * cfg.pp)
    compute = flops_micro / (hw.peak_flops * compute_efficiency(job, cfg, hw, consts))
    comm = comm_seconds(job, cfg, hw, consts)
    overlap = float(consts["comm_overlap"])
    hidden = overlap * compute  # backward/forward work a collective can run behind
    micro = (
        compute  # GEMM-bound work
        + dequant_seconds(job, cfg, hw, consts)  # NF4 dequantisation
        + comm["tp"]  # tensor-parallel all-reduces sit on the critical path
        + np.maximum(0.0, comm["zero"] - hidden)  # ZeRO-2/3 collectives behind compute
        + param_offload_seconds(job, cfg, hw)  # parameters streamed from the host
    )
    m = np.maximum(cfg.grad_accum, 1).astype(np.float64)
    bubble = (cfg.pp - 1) / m  # 1F1B pipeline bubble
    exposed_dp = np.maximum(0.0, comm["dp"] - hidden)  # last micro-batch's backward hides part of the all-reduce
    return m * micro * (1.0 + bubble) + exposed_dp + optimizer_seconds(job, cfg, hw, consts)


def job_time(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """step_seconds, tokens_per_second (whole job), mfu, hours (with load and checkpoint overheads), (n,) each.

    tokens/s = global_batch x s / step; MFU = model FLOPs per token x tokens/s / (cards x dense bf16 peak);
    hours = (steps x step + saves x c_save x 2 P / 1e9 + startup) / 3600, with a save every
    ``checkpoint_every_hours`` (scenario value, else calibration) plus the final one.
    """
    step = step_seconds(job, cfg, hw, consts)
    tokens_step = float(job.global_batch * job.seq_len)
    tps = tokens_step / step
    cards = (cfg.tp * cfg.pp * cfg.dp).astype(np.float64)
    mfu = model_flops_per_token(job) * tps / (cards * hw.bf16_flops)
    train_s = job.steps * step
    every_h = job.checkpoint_every_hours or float(consts["checkpoint_every_hours"])
    saves = np.floor(train_s / 3600.0 / every_h) + 1.0
    save_s = saves * float(consts["checkpoint_seconds_per_gb"]) * job.arch.total_params * 2.0 / 1e9
    hours = (train_s + save_s + float(consts["startup_seconds"])) / 3600.0
    return {"step_seconds": step, "tokens_per_second": tps, "mfu": mfu, "hours": hours}
