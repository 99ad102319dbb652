"""Builders for the memory-model tests: a Job and Configs from a few keywords, and the calibration constants."""

from __future__ import annotations

from typing import Any

import numpy as np

from optimizer.inputs.catalog import load_catalog
from optimizer.inputs.schema import (
    Attention,
    Checkpointing,
    Framework,
    LoraSpec,
    Loss,
    Method,
    ModelArch,
    Offload,
    OptimizerName,
    Precision,
    Sharding,
)
from optimizer.models.configs import CHECKPOINTING, OFFLOAD, OPTIMIZER, PRECISION, Configs, Job

# Llama-2-7B and Llama-3.1-8B as in catalogs/models.yaml (HF config.json values)
LLAMA2_7B = ModelArch(name="Llama-2-7B", layers=32, hidden=4096, intermediate=11008, heads=32, kv_heads=32,
                      vocab=32000, params=6738415616)  # fmt: skip
LLAMA31_8B = ModelArch(name="Llama-3.1-8B", layers=32, hidden=4096, intermediate=14336, heads=32, kv_heads=8,
                       vocab=128256, params=8030261248)  # fmt: skip
LLAMA32_3B = ModelArch(name="Llama-3.2-3B", layers=28, hidden=3072, intermediate=8192, heads=24, kv_heads=8,
                       vocab=128256, tied_embeddings=True, params=3212749824)  # fmt: skip


def consts() -> dict[str, Any]:
    """The ``memory`` section of the built-in catalogs/calibration.yaml."""
    return load_catalog().calibration["memory"]


def job(arch: ModelArch = LLAMA2_7B, method: str = "full", rank: int = 16, targets: list[str] | None = None,
        framework: str = "hf", sharding: str = "deepspeed", attention: str = "flash", loss: str = "auto",
        seq_len: int = 2048, dropout: float = 0.0, compile: bool = False, activation_offload: bool = False,
        optimizer_in_backward: bool = False, loss_parallel: bool | None = None,
        quant_kernel: str | None = None) -> Job:  # fmt: skip
    """A Job for the given architecture and method (base 4-bit for qlora, 16-bit otherwise)."""
    m = Method(method)
    lora = None if m is Method.full else LoraSpec(rank=rank, targets=targets or ["q_proj", "v_proj"], dropout=dropout)
    return Job(
        arch=arch, method=m, lora=lora, framework=Framework(framework), sharding=Sharding(sharding),
        attention=Attention(attention), loss=Loss(loss), base_bits=4 if m is Method.qlora else 16,
        seq_len=seq_len, global_batch=64, total_tokens=1e8, compile=compile, activation_offload=activation_offload,
        optimizer_in_backward=optimizer_in_backward, loss_parallel=loss_parallel, quant_kernel=quant_kernel,
        selective_recompute=load_catalog().calibration["timing"]["selective_recompute"][framework],
    )  # fmt: skip


def cfg(n: int = 1, tp: Any = 1, pp: Any = 1, dp: Any = 1, zero: Any = 0, offload: str | Any = "none",
        micro_batch: Any = 1, grad_accum: Any = 1, checkpointing: str = "none", precision: str = "bf16",
        optimizer: str = "adamw") -> Configs:  # fmt: skip
    """Configs of n rows; every argument is a scalar or an array of shape (n,)."""

    def col(v: Any) -> np.ndarray:
        return np.broadcast_to(np.asarray(v, dtype=np.int64), (n,)).copy()

    off = OFFLOAD.index(Offload(offload)) if isinstance(offload, str) else offload
    return Configs(
        tp=col(tp), pp=col(pp), dp=col(dp), zero_stage=col(zero), offload=col(off), micro_batch=col(micro_batch),
        grad_accum=col(grad_accum), checkpointing=col(CHECKPOINTING.index(Checkpointing(checkpointing))),
        precision=col(PRECISION.index(Precision(precision))), optimizer=col(OPTIMIZER.index(OptimizerName(optimizer))),
    )  # fmt: skip
