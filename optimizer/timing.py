"""Step time, throughput and wall-clock hours of a training job, as pure vectorised functions.

t_micro = FLOPs_micro / (peak x efficiency) + exposed tensor-parallel and ZeRO-3 gather traffic
t_step  = grad_accum x t_micro x (1 + pipeline bubble) + exposed data-parallel sync + optimizer step + offload
hours   = steps x t_step / 3600 + fixed overheads (load, checkpoint saves)

Sources: FLOPs per token 6N (+ attention 12 L h s) from the PaLM paper appendix B (arXiv 2204.02311) and Kaplan et
al. 2020; frozen-base LoRA 4N (formulas.md Part II section 3.1); ring collective volumes 2(n-1)/n M (all-reduce)
and (n-1)/n M (gather/scatter) from the NCCL-tests convention (formulas.md Part II section 3.2); 1F1B bubble
(p-1)/m from Narayanan et al. 2021 (arXiv 2104.04473). Efficiency and overlap constants live in
``catalogs/calibration.yaml`` (section ``timing``) with the cases they were fitted to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optimizer.configs import CHECKPOINTING, OFFLOAD, Configs, Hardware, Job
from optimizer.memory import trainable_params
from optimizer.schema import Checkpointing, Method, Offload

_CK_NONE, _CK_SEL, _CK_FULL = (CHECKPOINTING.index(c) for c in Checkpointing)
_NONE, _OPT, _ALL = (OFFLOAD.index(o) for o in Offload)


def matmul_params(job: Job) -> float:
    """Parameters that take part in matrix multiplies per token: active block weights plus the output layer.

    N = active params - input embedding (a lookup is free; the tied/untied output layer is a GEMM).
    """
    a = job.arch
    return float(a.active_params - a.vocab * a.hidden * (0 if a.tied_embeddings else 1))


def model_flops_per_token(job: Job) -> float:
    """Model FLOPs per trained token, without recomputation (the MFU numerator).

    full: 6N + 12 L h s; LoRA/QLoRA (frozen base, no weight-gradient GEMMs): 4N + 12 L h s. The attention term
    counts QK^T and AV forward and backward without causal halving (PaLM appendix B convention).
    """
    a = job.arch
    attn = 12.0 * a.layers * a.hidden * job.seq_len
    dense = (6.0 if job.method is Method.full else 4.0) * matmul_params(job)
    return dense + attn


def hardware_flops_per_token(job: Job, cfg: Configs, consts: Mapping[str, Any]) -> np.ndarray:
    """FLOPs actually executed per token: model FLOPs plus recomputation.

    full checkpointing repeats the forward: + 2N + 4 L h s; selective recomputes the attention core only:
    + 4 L h s (Korthikanti et al. 2022, section 5).
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
    """Fraction of peak reached by the GEMMs: family efficiency x T / (T + T_half), T = micro_batch x s x ... / tp.

    Small micro-batches underfill the GPU; the saturation constant T_half (tokens) is calibrated.
    """
    tokens = cfg.micro_batch * job.seq_len / cfg.tp
    t_half = float(consts["saturation_tokens"])
    method_factor = float(consts["method_factor"][job.method.value])
    return hw.efficiency * method_factor * tokens / (tokens + t_half)


def _ring(n: np.ndarray, factor: float) -> np.ndarray:
    n = n.astype(np.float64)
    return np.where(n > 1, factor * (n - 1) / n, 0.0)


def dp_bandwidth(cfg: Configs, hw: Hardware) -> np.ndarray:
    """Bytes/s per GPU for data-parallel collectives: the inter-node link when the job spans nodes."""
    return np.where(hw.nodes > 1, np.minimum(hw.intra_bytes_per_s, hw.inter_bytes_per_s), hw.intra_bytes_per_s)


def comm_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Communication time per optimizer step before overlap, by kind (seconds, (n,)).

    dp: ring all-reduce (stage 0) or reduce-scatter + all-gather (stages 1-2) of 2-byte gradients of the
    trainable parameters: 2 (n-1)/n x 2 P_train / (t p) bytes. ZeRO-3 adds two all-gathers of the 16-bit weights
    per micro-batch: 2 x grad_accum x (n-1)/n x 2 P / (t p). tp: 4 all-reduces per layer of T h 2 bytes per
    micro-batch (6 with full recomputation), ring over t GPUs inside the NVLink domain (Shoeybi et al. 2019).
    """
    a = job.arch
    split = (cfg.tp * cfg.pp).astype(np.float64)
    bw = dp_bandwidth(cfg, hw)
    grads = 2.0 * trainable_params(job) / split
    dp = _ring(cfg.dp, 2.0) * grads / bw
    base_bytes = 2.0 if job.base_bits == 16 else job.base_bits / 8.0
    gather = np.where(
        cfg.zero_stage >= 3, 2.0 * cfg.grad_accum * _ring(cfg.dp, 1.0) * base_bytes * a.total_params / split / bw, 0.0
    )
    per_layer = np.where(cfg.checkpointing == _CK_FULL, 6.0, 4.0)
    tp_bytes = per_layer * (a.layers / cfg.pp) * cfg.micro_batch * job.seq_len * a.hidden * 2.0
    tp = cfg.grad_accum * _ring(cfg.tp, 2.0) * tp_bytes / hw.tp_bytes_per_s
    return {"dp": dp, "gather": gather, "tp": tp}


def optimizer_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Optimizer step: memory-bound on the GPU (bytes_per_param x P_train / shards / HBM bandwidth), or on the CPU
    when offloaded (cpu_adam_seconds_per_param x local params), plus the PCIe round trip of 16-bit grads and
    params (2 x 2 P_local / PCIe bandwidth) per step (ZeRO-Offload, Ren et al. 2021).
    """
    split = (cfg.tp * cfg.pp).astype(np.float64)
    shard = np.where(cfg.zero_stage >= 1, cfg.dp, 1).astype(np.float64)
    local = trainable_params(job) / split / shard
    gpu = local * float(consts["optimizer_bytes_per_param"]) / hw.hbm_bytes_per_s
    cpu = local * float(consts["cpu_adam_seconds_per_param"]) + 4.0 * local / hw.pcie_bytes_per_s
    return np.where(cfg.offload == _NONE, gpu, cpu)


def step_seconds(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> np.ndarray:
    """Seconds per optimizer step (shape (n,)); see the module docstring for the formula."""
    tokens_micro = (cfg.micro_batch * job.seq_len).astype(np.float64)
    flops_micro = hardware_flops_per_token(job, cfg, consts) * tokens_micro / (cfg.tp * cfg.pp)
    compute = flops_micro / (hw.peak_flops * compute_efficiency(job, cfg, hw, consts))
    comm = comm_seconds(job, cfg, hw, consts)
    overlap = float(consts["dp_overlap"])
    micro = compute + comm["tp"] / np.maximum(cfg.grad_accum, 1) + comm["gather"] / np.maximum(cfg.grad_accum, 1)
    bubble = (cfg.pp - 1) / np.maximum(cfg.grad_accum, 1)
    body = cfg.grad_accum * micro * (1.0 + bubble)
    exposed_dp = np.maximum(0.0, comm["dp"] - overlap * compute)
    return body + exposed_dp + optimizer_seconds(job, cfg, hw, consts)


def job_time(job: Job, cfg: Configs, hw: Hardware, consts: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """step_seconds, tokens_per_second (whole job), mfu, hours (with load and checkpoint overheads), (n,) each."""
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
