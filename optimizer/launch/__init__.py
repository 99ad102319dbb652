"""Launch settings per engine: DeepSpeed, HF Trainer/accelerate, FSDP, torchtune, NeMo, LLaMA-Factory, Axolotl.

One module per engine (hf_args, ds_config, fsdp_args, torchtune_cfg, nemo_cfg, llamafactory_cfg, axolotl_cfg), in
exporters (the plans each serves and the file of its own it writes), the shared pieces in launch_common, the LoRA
target names per model family in lora_names (catalogs/lora_targets.yaml), and by_engine choosing among them. Each
module names the library versions it was checked against; ``tests_real/`` validates the settings with those
libraries (``.ci/launch-check``). tests/test_exporters.py checks this list against the registry.
"""

from optimizer.launch.by_engine import launch_settings
from optimizer.launch.ds_config import deepspeed_config, ds_declares_optimizer
from optimizer.launch.fsdp_args import fsdp_plugin
from optimizer.launch.hf_args import from_pretrained, hf_arguments, launcher
from optimizer.launch.launch_common import uses_deepspeed, uses_fsdp
from optimizer.launch.llamafactory_cfg import llamafactory_settings
from optimizer.launch.nemo_cfg import nemo_settings
from optimizer.launch.torchtune_cfg import torchtune_settings

__all__ = [
    "deepspeed_config",
    "ds_declares_optimizer",
    "from_pretrained",
    "fsdp_plugin",
    "hf_arguments",
    "launch_settings",
    "launcher",
    "llamafactory_settings",
    "nemo_settings",
    "torchtune_settings",
    "uses_deepspeed",
    "uses_fsdp",
]
