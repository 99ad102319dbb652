"""What the written settings ask of the planned GPU: an attention kernel it runs, a dtype it computes in.

The parsers accept a flash kernel or bf16 on any card; the card does not. For every case, each file's kernel and
precision are checked against the GPU's compute capability, bf16 through torch's own rule
(torch.cuda.is_bf16_supported standing for the planned card), FlashAttention 2 and FP8 through their documented
requirements (tests_real/gpu_facts.py).
"""

from __future__ import annotations

import pytest

from tests_real.cases import CASE_IDS, solved
from tests_real.gpu_facts import FP8_MIN_CC, capability, gpu_of, runs_flash_attention_2, torch_bf16

FLASH = {"flash_attention_2", "fa2", "flash"}


def _kernels(settings: dict) -> dict[str, str]:
    out = {}
    if "from_pretrained" in settings:
        out["from_pretrained"] = settings["from_pretrained"]["attn_implementation"]
    if "llamafactory.yaml" in settings:
        out["llamafactory"] = settings["llamafactory.yaml"]["flash_attn"]
    if "axolotl.yaml" in settings:
        out["axolotl"] = settings["axolotl.yaml"]["attn_implementation"]
    if "nemo" in settings:
        out["nemo"] = settings["nemo"]["transformer_config"]["attention_backend"]
    return out


def _bf16_asked(settings: dict) -> list[str]:
    asks = {
        "training_arguments": settings.get("training_arguments", {}).get("bf16"),
        "ds_config.json": settings.get("ds_config.json", {}).get("bf16", {}).get("enabled"),
        "llamafactory.yaml": settings.get("llamafactory.yaml", {}).get("bf16"),
        "axolotl.yaml": settings.get("axolotl.yaml", {}).get("bf16"),
        "torchtune": settings.get("torchtune", {}).get("dtype") == "bf16",
        "nemo": settings.get("nemo", {}).get("precision") == "bf16-mixed",
    }
    return [name for name, asked in asks.items() if asked]


def test_the_cases_cover_a_card_without_flash_and_bf16():
    """The check below means something only if some plan runs where flash and bf16 do not (a V100)."""
    assert any(not runs_flash_attention_2(gpu_of(solved(n).plan)) for n in CASE_IDS)


@pytest.mark.parametrize("name", CASE_IDS)
def test_the_attention_kernel_runs_on_the_planned_gpu(name):
    case = solved(name)
    gpu = gpu_of(case.plan)
    flash = {k: v for k, v in _kernels(case.settings).items() if v in FLASH}
    assert runs_flash_attention_2(gpu) or not flash, f"{gpu.id} has no FlashAttention 2, but {flash}"


@pytest.mark.parametrize("name", CASE_IDS)
def test_the_precision_is_one_the_planned_gpu_computes_in(name):
    case = solved(name)
    gpu = gpu_of(case.plan)
    asked = _bf16_asked(case.settings)
    assert torch_bf16(gpu) or not asked, f"{gpu.id}: torch says no bf16, but {asked} ask for it"
    if case.plan.precision.value == "fp8":
        assert gpu.vendor == "nvidia" and capability(gpu) >= FP8_MIN_CC, f"{gpu.id} has no FP8 tensor cores"
