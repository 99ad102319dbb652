"""The LLaMA-Factory export of every hf plan, parsed by LLaMA-Factory's own argument parser (``get_train_args``,
with the HF-DeepSpeed consistency checks of its transformers) in LLaMA-Factory's environment, which pins its own
transformers (``LAUNCH_LF_PYTHON``, set by .ci/launch-check), plus the environment llamafactory-cli reads.

Versions: .ci/launch-requirements-llamafactory.txt (llamafactory 0.9.5, transformers 5.6.0, DeepSpeed 0.19.8).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests_real.cases import checked_elsewhere, ids_for, solved

HF = ids_for("hf_deepspeed", "hf_fsdp")
CHECKER = Path(__file__).with_name("lf_check.py")


@functools.cache
def _results() -> dict[str, str]:
    cases = {}
    for name in HF:
        case = solved(name)
        lf = case.settings["llamafactory"]
        cases[name] = {"config": case.settings["llamafactory.yaml"], "ds_config": case.settings.get("ds_config.json"),
                       "dp": case.plan.dp, "command": lf["command"], "environment": lf["environment"]}  # fmt: skip
    return checked_elsewhere("LAUNCH_LF_PYTHON", CHECKER, cases)


@pytest.mark.parametrize("name", HF)
def test_llamafactory_parses_the_export(name):
    assert _results()[name] == "ok"


@pytest.mark.parametrize("name", HF)
def test_llamafactory_environment_starts_torchrun_where_needed(name):
    """FORCE_TORCHRUN=1 for DeepSpeed (one GPU too) and for several GPUs; NNODES/NODE_RANK/MASTER_ADDR across nodes
    (llamafactory launcher.py reads exactly these names)."""
    case = solved(name)
    env = case.settings["llamafactory"]["environment"]
    if "ds_config.json" in case.settings or case.plan.cards > 1:
        assert env.get("FORCE_TORCHRUN") == "1"
    if case.plan.nodes > 1:
        assert env["NNODES"] == str(case.plan.nodes) and {"NODE_RANK", "MASTER_ADDR", "MASTER_PORT"} <= set(env)
    assert int(env["NPROC_PER_NODE"]) * case.plan.nodes == case.plan.cards
