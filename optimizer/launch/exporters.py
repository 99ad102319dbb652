"""The one registry of launch exporters: each engine module, the plans it serves, and the file it writes, if any.

``ftopt solve --launch-dir`` writes ``launch.yaml`` (every exporter's settings for the plan) and, for each exporter
with a ``file`` that applies to the plan, that file built by its ``build``. Nothing else becomes a file. The
package docstring (launch/__init__.py), README's engine table and the ``--launch-dir`` help are built from or
checked against this list (tests/test_exporters.py): a new exporter is one module, one entry here and its tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from optimizer.inputs.schema import Framework, ModelArch, Scenario
from optimizer.inputs.schema_plan import Plan
from optimizer.launch.axolotl_cfg import CONFIG_FILE, axolotl_config
from optimizer.launch.ds_config import deepspeed_config
from optimizer.launch.launch_common import uses_deepspeed
from optimizer.launch.llamafactory_cfg import llamafactory_config

LAUNCH_FILE = "launch.yaml"  # every exporter's settings, always written
YAML_WIDTH = 116


def _always(scenario: Scenario, plan: Plan) -> bool:
    return True


Build = Callable[[Scenario, Plan, ModelArch | None], dict[str, Any]]  # a file's body; the architecture names targets


@dataclass(frozen=True)
class Exporter:
    """One engine module of optimizer/launch and what it exports.

    ``frameworks``: the scenario frameworks whose plans it serves; ``applies``: a further condition on the plan (e.g.
    DeepSpeed only when the plan runs under it); ``file``, ``build`` and ``fmt``: the file of its own beside
    launch.yaml and its body (None: its settings live in launch.yaml only); ``build`` gets the model's architecture,
    None where unknown, for the LoRA target names (lora_names.py).
    """

    engine: str  # README "engine" column
    module: str  # optimizer/launch/<module>.py
    writes: str  # what it writes (README)
    checked_against: str  # library versions (README; tests_real/ validates them)
    frameworks: frozenset[Framework]
    file: str | None = None
    build: Build | None = None
    fmt: Literal["json", "yaml"] = "yaml"
    applies: Callable[[Scenario, Plan], bool] = _always
    plans: str = ""  # for which plans, in words (README, --launch-dir help)

    def writes_file(self, scenario: Scenario, plan: Plan) -> bool:
        """Whether ``--launch-dir`` writes this exporter's file for the plan."""
        served = scenario.training.framework in self.frameworks
        return self.file is not None and served and self.applies(scenario, plan)


HF = frozenset({Framework.hf})
EXPORTERS: tuple[Exporter, ...] = (
    Exporter("HF Trainer / TRL / PEFT", "hf_args", "TrainingArguments (with Liger's fused loss, use_liger_kernel, "
             "when the loss is fused), TRL SFTConfig (packing, max_length), from_pretrained (attention kernel, "
             "4/8-bit loading), LoraConfig, `accelerate launch` command",
             "transformers 5.24 (oldest: 5.23, first with `activation_checkpointing`), accelerate 1.15, peft 0.21, "
             "trl 1.16", HF),  # fmt: skip
    Exporter("DeepSpeed", "ds_config", "ds_config.json (ZeRO stage, offload, batch sizes, precision, "
             "auto bucket sizes)",
             "DeepSpeed 0.19.8", HF, file="ds_config.json", build=lambda sc, p, arch: deepspeed_config(p), fmt="json",
             applies=uses_deepspeed, plans="hf plans under DeepSpeed"),  # fmt: skip
    Exporter("FSDP (accelerate)", "fsdp_args", "`--fsdp_*` flags", "accelerate 1.15, torch 2.13", HF),
    Exporter("torchtune", "torchtune_cfg", "recipe overrides (model builder incl. `qlora_*`, LoRA keys, optimizer, "
             "packed dataset, tokenizer max_seq_len, epochs x max_steps_per_epoch), `tune run` command",
             "torchtune 0.6.1",
             frozenset({Framework.torchtune})),  # fmt: skip
    Exporter("NeMo 2 / Megatron-Core", "nemo_cfg", "TransformerConfig, DDP (distributed optimizer, Megatron FSDP), "
             "OptimizerConfig (precision-aware CPU offload), data module (packed sequences), LoRA, trainer max_steps, "
             "ModelCheckpoint", "megatron-core 0.16.1",
             frozenset({Framework.nemo})),  # fmt: skip
    Exporter("LLaMA-Factory", "llamafactory_cfg", "`llamafactory-cli train` YAML and its environment "
             "(FORCE_TORCHRUN, NNODES, NODE_RANK, MASTER_ADDR)", "llamafactory 0.9.5", HF, file="llamafactory.yaml",
             build=llamafactory_config, plans="hf plans"),  # fmt: skip
    Exporter("Axolotl", "axolotl_cfg", "`axolotl train` YAML (adapter, sequence_len, sample_packing, "
             "attn_implementation, precision, DeepSpeed or FSDP2, optimizer) and a torchrun command",
             "axolotl 0.19.0", HF, file=CONFIG_FILE, build=axolotl_config, plans="hf plans"),  # fmt: skip
)


def file_names() -> list[str]:
    """Every file ``--launch-dir`` can write, launch.yaml first, in registry order."""
    return [LAUNCH_FILE] + [e.file for e in EXPORTERS if e.file is not None]


def file_exports(scenario: Scenario, plan: Plan, arch: ModelArch | None = None) -> dict[str, dict[str, Any]]:
    """File name -> body of every exporter file that applies to the plan (also shown in launch.yaml)."""
    return {e.file: e.build(scenario, plan, arch) for e in EXPORTERS
            if e.writes_file(scenario, plan) and e.file and e.build}  # fmt: skip


def yaml_text(body: Any) -> str:
    """Settings as indented YAML, in the order built."""
    return yaml.safe_dump(body, sort_keys=False, default_flow_style=False, width=YAML_WIDTH).rstrip()


def render(settings: dict[str, Any]) -> dict[str, str]:
    """File name -> text for ``--launch-dir``: launch.yaml (everything) and each registered file in the settings."""
    files = {LAUNCH_FILE: yaml_text(settings) + "\n"}
    for e in EXPORTERS:
        if e.file is not None and e.file in settings:
            body = settings[e.file]
            files[e.file] = (json.dumps(body, indent=2) if e.fmt == "json" else yaml_text(body)) + "\n"
    return files


def launch_dir_help() -> str:
    """The ``--launch-dir`` help: the files and the plans each serves."""
    extra = ", ".join(f"{e.file} ({e.plans})" for e in EXPORTERS if e.file is not None)
    return (f"Write {LAUNCH_FILE} (every setting) and {extra} here, all or none; those names the plan does not "
            "write are removed, other files kept.")


def readme_table() -> str:
    """README's engine table (tests/test_exporters.py checks README.md holds it verbatim)."""
    rows = ["| engine | module | writes | checked against |", "| --- | --- | --- | --- |"]
    rows += [f"| {e.engine} | `{e.module}.py` | {e.writes} | {e.checked_against} |" for e in EXPORTERS]
    return "\n".join(rows)
