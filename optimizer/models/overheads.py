"""Wall-clock overheads that depend on the rented machine: checkpoint saves on the offer's disk, start-up by nodes.

The step-time model (timing.py) gives seconds per optimizer step; a job's wall clock adds what the hosts do
around the steps (arrays of shape (n,), seconds unless named otherwise):

    ckpt   = P_train x B_ckpt                                  # bytes of one resumable checkpoint (whole job)
    save   = ckpt / nodes / disk_write                         # nodes write their shards in parallel
    every  = scenario's every_h, else sqrt(2 save M)           # Young/Daly interval for on-demand failures
    saves  = floor(train / every) + 1                          # periodic saves plus the final one
    start  = startup + per_doubling x log2(nodes) + 2 P / disk   # framework start, rendezvous, the model on disk
    lost   = train / M x (start + save + min(every, train) / 2)  # expected failures x (restart + half an interval)
    hours  = (train + saves x save + start + lost) / 3600

B_ckpt per optimizer (calibration ``hosts.checkpoint_bytes_per_param``): 16-bit weights + fp32 master + moments,
the ZeRO paper's mixed-precision Adam states (arXiv 1910.02054 section 3.1) less the gradients. The disk speeds and
the start-up growth are stated assumptions in calibration.yaml ``hosts``; the save interval is the scenario's
``training.checkpoint_every_hours``, else the Young/Daly optimum for the job's mean time between hardware failures
M = ``hosts.on_demand_gpu_mtbi_hours`` x 3600 / cards (Llama 3's unexpected interruptions per GPU-hour on 16,384
H100s, calibration.yaml), so that a run shorter than the interval saves once, at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optimizer.models.configs import OPTIMIZER, Configs, Job
from optimizer.models.memory import trainable_params


def checkpoint_bytes(job: Job, cfg: Configs, hosts: Mapping[str, Any]) -> np.ndarray:
    """Bytes of one resumable checkpoint of the whole job, (n,) float: P_train x B_ckpt(optimizer).

    LoRA/QLoRA save the adapters and their optimizer states only (the frozen base is re-downloaded).
    """
    per_param = np.array([float(hosts["checkpoint_bytes_per_param"][o.value]) for o in OPTIMIZER])
    return float(trainable_params(job)) * per_param[cfg.optimizer]


def save_seconds(ckpt_bytes: np.ndarray, nodes: np.ndarray, disk_bytes_per_s: np.ndarray) -> np.ndarray:
    """Seconds for one save, (n,): ckpt / nodes / disk write rate (each node writes its share to its own disk)."""
    return ckpt_bytes / np.maximum(nodes, 1).astype(np.float64) / disk_bytes_per_s


def startup_seconds(nodes: np.ndarray, base_s: float, per_doubling_s: float) -> np.ndarray:
    """Start-up of the whole job, (n,): base_s + per_doubling_s x log2(nodes) (1 node: base_s)."""
    return base_s + per_doubling_s * np.log2(np.maximum(nodes, 1).astype(np.float64))


def model_write_seconds(job: Job, disk_bytes_per_s: np.ndarray) -> np.ndarray:
    """Seconds to put the published 16-bit model on a node's local disk once, (n,): 2 P / disk write rate.

    Every node downloads the whole model (a QLoRA base too: it is quantised as it loads, :func:`disk_need_bytes`)
    and writes it to its own disk, the nodes side by side; the download itself is taken to be no slower (no offer
    states its network rate), so this is a lower bound that grows with the model where the fixed start-up
    (``timing.startup_seconds``) does not: 16 GB for an 8B model, 810 GB for a 405B one. A restart after a failure
    pays it again (a replacement node starts empty).
    """
    return job.arch.total_params * 2.0 / disk_bytes_per_s


def saves_count(train_s: np.ndarray, every_h: float | np.ndarray) -> np.ndarray:
    """Checkpoint saves of an uninterrupted run, (n,): floor(train hours / every_h) + 1 (the final save)."""
    return np.floor(train_s / 3600.0 / every_h) + 1.0


def failure_seconds(train_s: np.ndarray, mtbi_s: np.ndarray, restart_s: np.ndarray,
                    interval_s: np.ndarray) -> np.ndarray:  # fmt: skip
    """Expected seconds lost to hardware failures of an on-demand run, (n,).

    train / M failures, each costing a restart (start-up and reading the checkpoint back) and, on average, half of
    the work since the last save: min(interval, train) / 2.
    """
    return train_s / mtbi_s * (restart_s + np.minimum(interval_s, train_s) / 2.0)


def disk_need_bytes(job: Job, ckpt_bytes: np.ndarray, nodes: np.ndarray, kept: int) -> np.ndarray:
    """Local disk per node, (n,): the base model as published (16-bit) + ``kept`` checkpoint shards.

    A QLoRA base is downloaded in 16 bits too and quantised as it is loaded (bitsandbytes load_in_4bit, torchtune's
    NF4 builders, LLaMA-Factory quantization_bit), so it needs its 16-bit size on disk, not its 4-bit size in
    memory. The dataset is not counted (its size on disk depends on the format); the requirement line says so.
    """
    base = job.arch.total_params * 2.0
    return base + kept * ckpt_bytes / np.maximum(nodes, 1).astype(np.float64)
