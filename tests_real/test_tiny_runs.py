"""Two training steps of a tiny Llama on CPU, started with the command ftopt writes, on two ranks over gloo.

DeepSpeed: ``accelerate launch --use_deepspeed`` with the plan's flags and ds_config.json (DeepSpeed's CPU
accelerator); 2 processes instead of the plan's cards (train_batch_size rescaled to them), ``use_cpu`` in
TrainingArguments (transformers refuses bf16 on a CPU otherwise). torchtune: ``tune run`` of the full fine-tuning
recipe with the plan's overrides, which shards the model with FSDP2; 2 processes, a 2-layer stand-in model, tokenizer
and data (tests_real/tt_tiny.py). Not run: accelerate's FSDP, which accelerate turns on only on an accelerator (on
a CPU the Trainer silently runs plain DDP, which would prove nothing).
"""

from __future__ import annotations

import json
import os
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


def _torchtune_config(case, tmp_path: Path) -> Path:
    """The shipped 1B recipe config, ftopt's overrides over it, then the tiny stand-ins and a two-step run."""
    import torch
    import torchtune
    from omegaconf import OmegaConf

    from tests_real.tt_tiny import tiny_llama

    recipes = Path(torchtune.__file__).resolve().parent.parent / "recipes"
    cfg = OmegaConf.merge(OmegaConf.load(recipes / "configs" / "llama3_2" / "1B_full.yaml"),
                          OmegaConf.create(case.settings["torchtune"]))  # fmt: skip
    (tmp_path / "ckpt").mkdir()
    torch.manual_seed(0)
    torch.save(tiny_llama().state_dict(), tmp_path / "ckpt" / "model.pt")
    tiny = {
        "model": {"_component_": "tests_real.tt_tiny.tiny_llama"},
        "tokenizer": {"_component_": "tests_real.tt_tiny.tiny_tokenizer"},
        "dataset": {"_component_": "tests_real.tt_tiny.tiny_dataset"},
        "checkpointer": {"_component_": "torchtune.training.FullModelTorchTuneCheckpointer",
                         "checkpoint_dir": str(tmp_path / "ckpt"), "checkpoint_files": ["model.pt"],
                         "recipe_checkpoint": None, "output_dir": str(tmp_path / "out"), "model_type": "LLAMA3_2"},
        "metric_logger": {"_component_": "torchtune.training.metric_logging.DiskLogger",
                          "log_dir": str(tmp_path / "logs")},
        "output_dir": str(tmp_path / "out"), "device": "cpu", "epochs": 1, "max_steps_per_epoch": 2,
        "log_peak_memory_stats": False,  # CUDA only
    }  # fmt: skip
    path = tmp_path / "config.yaml"
    OmegaConf.save(OmegaConf.merge(cfg, OmegaConf.create(tiny)), path)
    return path


def test_torchtune_trains_two_steps_with_the_written_overrides(tmp_path):
    """torchtune's full_finetune_distributed on two CPU ranks (FSDP2 over gloo) with the tt-full-z3 plan's keys
    (batch size, accumulation, reshard after forward, dtype, checkpointing): the model is a 2-layer stand-in
    (tests_real/tt_tiny.py), the command is the written ``tune run`` with 2 processes and the config file."""
    case = solved("tt-full-z3")
    argv = shlex.split(case.settings["command"])
    argv[argv.index("--nproc_per_node") + 1] = str(RANKS)
    argv[argv.index("--config") + 1] = str(_torchtune_config(case, tmp_path))
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run([str(Path(sys.executable).with_name("tune")), *argv[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=1200, env={**os.environ, "PYTHONPATH": str(repo)})  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = next((tmp_path / "logs").glob("*.txt")).read_text()
    assert "Step 2 |" in log and "Step 3 |" not in log, log
