"""The planned GPU as the libraries see it: its compute capability (catalogs/gpus.yaml, vendor datasheets) and what
torch, Axolotl and the attention kernels decide from it."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any
from unittest import mock

from optimizer.inputs.catalog import load_catalog
from optimizer.inputs.schema_catalog import Gpu
from optimizer.inputs.schema_plan import Plan

# FlashAttention 2 runs on Ampere, Ada, Hopper and Blackwell (compute capability 8.0+; Dao-AILab/flash-attention
# README "Requirements": Turing and Volta are not supported) and on AMD MI200/MI300 (README "AMD ROCm Support")
FLASH_MIN_CC = (8, 0)
FLASH_AMD_ARCHS = {"cdna2", "cdna3"}
# FP8 tensor cores: Ada and Hopper and later, compute capability 8.9+ (NVIDIA Transformer Engine docs, installation
# "Ada (sm_89), Hopper (sm_90)" for FP8)
FP8_MIN_CC = (8, 9)


def gpu_of(plan: Plan) -> Gpu:
    """The catalog GPU the plan rents."""
    return load_catalog().gpus[plan.gpu]


def capability(gpu: Gpu) -> tuple[int, int]:
    """(major, minor) compute capability; (0, 0) for a GPU without one (AMD)."""
    if not gpu.compute_capability:
        return (0, 0)
    major, _, minor = gpu.compute_capability.partition(".")
    return int(major), int(minor or 0)


@contextlib.contextmanager
def as_planned_gpu(gpu: Gpu) -> Any:
    """torch.cuda standing for the planned GPU: available, one device, its compute capability (ROCm for AMD)."""
    import torch

    major, minor = capability(gpu)
    props = SimpleNamespace(major=major, minor=minor, name=gpu.name, gcnArchName="gfx942")
    hip = "6.2" if gpu.vendor == "amd" else None
    with mock.patch.object(torch.cuda, "is_available", lambda: True), \
            mock.patch.object(torch.cuda, "current_device", lambda: 0), \
            mock.patch.object(torch.cuda, "get_device_properties", lambda *a, **k: props), \
            mock.patch.object(torch.version, "hip", hip):  # fmt: skip
        yield


def torch_bf16(gpu: Gpu) -> bool:
    """torch's own answer (torch.cuda.is_bf16_supported, no emulation) on the planned GPU."""
    import torch

    with as_planned_gpu(gpu):
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))


def runs_flash_attention_2(gpu: Gpu) -> bool:
    """Whether FlashAttention 2 runs on the GPU (README requirements above)."""
    if gpu.vendor == "amd":
        return gpu.arch in FLASH_AMD_ARCHS
    return capability(gpu) >= FLASH_MIN_CC


def axolotl_capabilities(plan: Plan) -> dict[str, Any]:
    """Axolotl's GPUCapabilities for the planned GPU, as its CLI detects them (bf16 through torch)."""
    gpu = gpu_of(plan)
    cc = capability(gpu)
    return {"bf16": torch_bf16(gpu), "fp8": gpu.vendor == "nvidia" and cc >= FP8_MIN_CC,
            "tf32": gpu.vendor == "nvidia" and cc >= (8, 0), "n_gpu": plan.cards, "n_node": plan.nodes,
            "compute_capability": f"sm_{cc[0]}{cc[1]}" if gpu.vendor == "nvidia" else "gfx942"}  # fmt: skip
