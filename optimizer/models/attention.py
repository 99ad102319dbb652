"""Which attention kernel a plan runs on a GPU: FlashAttention 2 only where it exists, else PyTorch SDPA.

FlashAttention 2 (``training.attention: flash``) supports NVIDIA Ampere, Ada and Hopper GPUs, i.e. compute
capability 8.0 or newer (Dao-AILab/flash-attention README, "Installation and features", "Requirements"; Turing and
Volta are named as unsupported, FlashAttention 1.x being the version for them), and AMD Instinct MI200/MI300
through its ROCm backend (same README, "AMD ROCm Support"). On any other GPU a plan that asks for flash runs
PyTorch's scaled_dot_product_attention, whose memory-efficient kernel also keeps the s x s scores out of memory,
so the memory model's flash/SDPA activation term (models/activations.py) prices both alike and no figure changes.
"""

from __future__ import annotations

from optimizer.inputs.schema import Attention
from optimizer.inputs.schema_catalog import Gpu

FLASH_MIN_COMPUTE_CAPABILITY = (8, 0)  # FlashAttention 2 README, Requirements: Ampere, Ada or Hopper (sm80+)
FLASH_AMD_ARCHS = frozenset({"cdna3"})  # FlashAttention 2 README, AMD ROCm Support: MI200 / MI300 (CDNA2/3)


def runs_flash(gpu: Gpu) -> bool:
    """True when FlashAttention 2 runs on ``gpu`` (module docstring).

    An NVIDIA card without a known compute capability counts as unsupported.
    """
    if gpu.vendor == "amd":
        return gpu.arch in FLASH_AMD_ARCHS
    if not gpu.compute_capability:
        return False
    major, _, minor = gpu.compute_capability.partition(".")
    return (int(major), int(minor or 0)) >= FLASH_MIN_COMPUTE_CAPABILITY


def attention_on(gpu: Gpu, requested: Attention) -> Attention:
    """The kernel the plan runs: ``requested``, except flash on a GPU without FlashAttention 2, which runs sdpa."""
    if requested is Attention.flash and not runs_flash(gpu):
        return Attention.sdpa
    return requested
