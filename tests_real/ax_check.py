"""Run inside Axolotl's own environment: validate each exported axolotl.yaml with Axolotl's ``validate_config``.

Usage: python ax_check.py CASES.json RESULTS.json. CASES.json maps a case name to {"config", "ds_config",
"capabilities"}, the capabilities those of the plan's GPU (bf16, fp8, tf32, compute capability, GPU and node
counts) as Axolotl's CLI would detect them on it; RESULTS.json maps the name to "ok" or the error text. A warning
Axolotl logs about the GPU (bf16 on a card without it; sample packing with SDPA in bf16 before Hopper) is a failure:
the settings would ask the card for what it does not do well.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

GPU_WARNINGS = ("bf16 requested, but AMP is not supported", "sample_packing & torch sdpa with bf16")


class _Caught(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _check(case: dict, workdir: Path) -> str:
    import torch
    from axolotl.cli.config import prepare_plugins
    from axolotl.utils.config import validate_config
    from axolotl.utils.dict import DictDefault

    config = dict(case["config"])
    if "deepspeed" in config:
        path = workdir / "ds_config.json"
        path.write_text(json.dumps(case["ds_config"]))
        config["deepspeed"] = str(path)
    caught = _Caught()
    logging.getLogger("axolotl").addHandler(caught)
    try:
        cfg = DictDefault(config)
        prepare_plugins(cfg)  # as `axolotl train` does before validating (cli/config.py load_cfg): plugin keys
        cfg = validate_config(cfg, capabilities=case["capabilities"],
                              env_capabilities={"torch_version": torch.__version__.split("+")[0]})  # fmt: skip
    finally:
        logging.getLogger("axolotl").removeHandler(caught)
    gpu = [m for m in caught.messages if m.startswith(GPU_WARNINGS)]
    if gpu:
        return "GPU warning: " + " | ".join(gpu)
    for key in ("sequence_len", "micro_batch_size", "gradient_accumulation_steps", "sample_packing"):
        assert cfg[key] == config[key], (key, cfg[key], config[key])
    assert cfg["attn_implementation"] == config["attn_implementation"]
    for key in ("max_steps", "save_total_limit", "lr_scheduler", "warmup_steps", "accelerator_config",
                "liger_fused_linear_cross_entropy"):  # the Liger plugin's key survives validation (fused loss)
        assert cfg.get(key) == config.get(key), (key, cfg.get(key), config.get(key))
    if config.get("accelerator_config"):  # the builder passes it to accelerate's AcceleratorConfig
        from transformers.trainer_pt_utils import AcceleratorConfig

        AcceleratorConfig(**config["accelerator_config"])
    return "ok"


if __name__ == "__main__":
    from check_runner import run  # beside this script, which runs from this folder

    run(_check)
