"""torchtune plans: the overrides merged into the shipped recipe config, the recipe's own start-up checks (its
__init__ on one CPU rank over gloo), and the model builder the overrides name, bound to their LoRA arguments.

Versions: .ci/launch-requirements.txt (torchtune 0.6.1, torchao, torch 2.13.0 CPU).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from pathlib import Path

import pytest

from tests_real.cases import ids_for, solved

TORCHTUNE = ids_for("torchtune")
_BASE_CONFIG = {"full_finetune_distributed": "llama3_1/8B_full", "lora_finetune_distributed": "llama3_1/8B_lora",
                "full_finetune_single_device": "llama3_1/8B_full_single_device",
                "lora_finetune_single_device": "llama3_1/8B_lora_single_device"}  # fmt: skip
_RECIPE_CLASS = {"full_finetune_distributed": "FullFinetuneRecipeDistributed",
                 "lora_finetune_distributed": "LoRAFinetuneRecipeDistributed",
                 "full_finetune_single_device": "FullFinetuneRecipeSingleDevice",
                 "lora_finetune_single_device": "LoRAFinetuneRecipeSingleDevice"}  # fmt: skip


def _recipe(case) -> str:
    return case.settings["command"].split(" --config ")[0].split()[-1]


def _recipes_dir() -> Path:
    import torchtune

    return Path(torchtune.__file__).resolve().parent.parent / "recipes"  # installed beside the package


def _recipe_module(name: str):
    """A recipe script loaded as a module (the recipes folder refuses to be imported as a package)."""
    spec = importlib.util.spec_from_file_location(f"_ftopt_{name}", _recipes_dir() / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(case, tmp_path):
    """The shipped recipe config with ftopt's overrides merged over it, as ``tune run`` applies them."""
    from omegaconf import OmegaConf

    base = OmegaConf.load(_recipes_dir() / "configs" / f"{_BASE_CONFIG[_recipe(case)]}.yaml")
    overrides = OmegaConf.create(case.settings["torchtune"])
    cfg = OmegaConf.merge(base, overrides)
    for removed in [a[1:] for a in case.settings["command"].split() if a.startswith("~")]:  # as tune run removes
        parent, _, key = removed.rpartition(".")
        del OmegaConf.select(cfg, parent)[key]
    cfg.output_dir = str(tmp_path / "out")
    return cfg


def test_an_adafactor_plan_builds_its_optimizer_from_the_merged_config(tmp_path):
    """The recipe configs carry optimizer.fused: True; merged into an Adafactor block it raised TypeError, and
    transformers' Adafactor raises for a manual lr with its default relative_step (the command removes fused)."""
    import torch
    from torchtune import config as tt_config

    case = solved("tt-adafactor")
    cfg = _config(case, tmp_path)
    assert "fused" not in cfg.optimizer
    tt_config.instantiate(cfg.optimizer, [torch.nn.Parameter(torch.zeros(4))])  # raises on an argument it lacks


@pytest.mark.parametrize("name", TORCHTUNE)
def test_the_model_builder_exists_and_takes_the_lora_arguments(name):
    from torchtune.config._utils import _get_component_from_path

    model = dict(solved(name).settings["torchtune"]["model"])
    builder = _get_component_from_path(model.pop("_component_"))
    inspect.signature(builder).bind(**model)  # raises TypeError for an argument the builder does not take
    if solved(name).scenario.method.value == "qlora":
        # qlora_* builders are partial(lora_*, quantize_base=True)
        assert getattr(builder, "keywords", {}).get("quantize_base") is True


@pytest.mark.parametrize("name", TORCHTUNE)
def test_the_optimizer_component_resolves(name):
    from torchtune.config._utils import _get_component_from_path

    assert _get_component_from_path(solved(name).settings["torchtune"]["optimizer"]["_component_"])


@pytest.mark.parametrize("name", TORCHTUNE)
def test_the_recipe_starts_with_the_settings(name, tmp_path, monkeypatch):
    """The recipe's __init__ runs its checks: dtype (no fp16), optimizer in backward (no accumulation, no clipping),
    activation offloading (needs checkpointing), FSDP offload with the process group it starts."""
    import torch.distributed as dist

    case = solved(name)
    recipes = _recipe_module(_recipe(case))
    cfg = _config(case, tmp_path)
    cfg.device = "cpu"
    if cfg.get("enable_activation_offloading"):
        # CUDA only ("should only be True when training on CUDA"); the check this CPU run can make is the one the
        # recipe makes next: offloading only with activation checkpointing
        assert cfg.enable_activation_checkpointing
        cfg.enable_activation_offloading = False
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29512", "RANK": "0", "LOCAL_RANK": "0",
                       "WORLD_SIZE": "1"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    # on a GPU the backend is "cuda:nccl,cpu:gloo" with FSDP offload; on this CPU rank both halves would be gloo,
    # which torch rejects as a duplicate device type, so the CPU rank gets plain gloo
    monkeypatch.setattr(recipes.training, "get_distributed_backend", lambda *args, **kwargs: "gloo")
    try:
        recipe = getattr(recipes, _RECIPE_CLASS[_recipe(case)])(cfg)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert recipe._gradient_accumulation_steps == case.plan.grad_accum
    # the run length: the recipe reads epochs and max_steps_per_epoch (optimizer steps) from the merged config
    assert (recipe.total_epochs, recipe.max_steps_per_epoch) == (cfg.epochs, cfg.max_steps_per_epoch)
    assert cfg.epochs * cfg.max_steps_per_epoch >= case.settings["torchtune"]["max_steps_per_epoch"] > 0


@pytest.mark.parametrize("name", TORCHTUNE)
def test_the_dataset_and_tokenizer_take_the_plans_rows(name, tmp_path):
    """The shipped recipe's dataset builder takes ``packed`` and its tokenizer ``max_seq_len``: rows of seq_len
    tokens, packed when the plan counts packed rows (the recipes raise for packed without max_seq_len)."""
    from torchtune.config._utils import _get_component_from_path

    case = solved(name)
    cfg = _config(case, tmp_path)
    assert cfg.dataset.packed is case.scenario.data.packing and cfg.tokenizer.max_seq_len == case.scenario.seq_len
    dataset = {k: v for k, v in cfg.dataset.items() if k != "_component_"}
    inspect.signature(_get_component_from_path(cfg.dataset._component_)).bind(tokenizer=None, **dataset)
    tokenizer = {k: v for k, v in cfg.tokenizer.items() if k != "_component_"}
    inspect.signature(_get_component_from_path(cfg.tokenizer._component_)).bind(**tokenizer)
