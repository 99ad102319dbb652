"""The Axolotl export of every hf plan, validated by Axolotl's own ``validate_config`` with the capabilities of the
plan's GPU, in Axolotl's environment, which pins its own transformers (``LAUNCH_AX_PYTHON``, set by
.ci/launch-check).

Versions: .ci/launch-requirements-axolotl.txt (axolotl 0.19.0).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests_real.cases import checked_elsewhere, ids_for, solved
from tests_real.gpu_facts import axolotl_capabilities

HF = ids_for("hf_deepspeed", "hf_fsdp")
CHECKER = Path(__file__).with_name("ax_check.py")


@functools.cache
def _results() -> dict[str, str]:
    cases = {}
    for name in HF:
        case = solved(name)
        cases[name] = {"config": case.settings["axolotl.yaml"], "ds_config": case.settings.get("ds_config.json"),
                       "capabilities": axolotl_capabilities(case.plan)}  # fmt: skip
    return checked_elsewhere("LAUNCH_AX_PYTHON", CHECKER, cases)


@pytest.mark.parametrize("name", HF)
def test_axolotl_validates_the_export_for_the_planned_gpu(name):
    """Valid, and no warning about the GPU unless the launch notes pass Axolotl's warning on (sdpa packing in bf16
    before Hopper, a kernel the scenario asked for)."""
    result = _results()[name]
    if result.startswith("GPU warning: sample_packing & torch sdpa with bf16"):
        notes = solved(name).settings.get("notes", [])
        assert any(n.startswith("axolotl.yaml: Axolotl warns that sample_packing with sdpa") for n in notes), notes
        return
    assert result == "ok"
