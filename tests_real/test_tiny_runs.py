"""Two training steps of a tiny Llama on CPU, started with the command ftopt writes for a DeepSpeed plan:
``accelerate launch --use_deepspeed`` with the plan's flags and files, two ranks on DeepSpeed's CPU accelerator.

What differs from the plan, and why: 2 processes instead of the plan's card count (train_batch_size in ds_config
rescaled to them); ``use_cpu`` in TrainingArguments (transformers refuses bf16 on CPU otherwise).
Not run here: FSDP (accelerate turns FSDP on only on an accelerator; on a CPU the Trainer silently runs plain
DDP, which would prove nothing) and torchtune (its recipes need a checkpoint and a tokenizer on disk).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests_real.cases import solved

TINY = Path(__file__).with_name("tiny_train.py")
RANKS = 2


def _command(case, tmp_path: Path) -> list[str]:
    settings = {"training_arguments": case.settings["training_arguments"], "output_dir": str(tmp_path / "out")}
    if "ds_config.json" in case.settings:
        ds = dict(case.settings["ds_config.json"])
        ds["train_batch_size"] = ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * RANKS
        (tmp_path / "ds_config.json").write_text(json.dumps(ds))
        settings["ds_config_path"] = str(tmp_path / "ds_config.json")
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    argv = shlex.split(case.settings["command"])
    argv[argv.index("--num_processes") + 1] = str(RANKS)
    argv[-1:] = [str(TINY), str(tmp_path / "settings.json")]  # train.py -> the tiny script
    return [str(Path(sys.executable).with_name("accelerate")), *argv[1:]]


@pytest.mark.parametrize("name", ["ds-z2-none"])
def test_two_steps_run_with_the_written_launch_command(name, tmp_path):
    case = solved(name)
    done = subprocess.run(_command(case, tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.count("tiny run: 2 steps") == RANKS
