"""The plan becomes launchable settings: DeepSpeed JSON, HF TrainingArguments, FSDP, torchtune and NeMo keys."""

from __future__ import annotations

import json

from optimizer.catalog import load_scenario, resolve_model
from optimizer.launch import deepspeed_config, fsdp_plugin, hf_arguments, launch_settings
from optimizer.planner import solve_scenario
from optimizer.schema import Scenario
from optimizer.schema_plan import Plan
from optimizer.space import enumerate_all

from .conftest import REPO, scenario_doc


def _plan(**changes) -> Plan:
    base = dict(gpu="A100-80G", offer="x", cards=16, nodes=2, tp=1, pp=1, dp=16, zero_stage=3, offload="optimizer",
                micro_batch=2, grad_accum=4, precision="bf16", optimizer="adamw", checkpointing="full", term="hour",
                billed_units={"hour": 10})  # fmt: skip
    return Plan(**{**base, **changes})


def test_deepspeed_config_offloads_the_optimizer_but_not_the_parameters():
    ds = deepspeed_config(_plan())
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "offload_param" not in ds["zero_optimization"]


def test_deepspeed_config_offloads_parameters_for_offload_all_at_stage_3():
    assert "offload_param" in deepspeed_config(_plan(offload="all"))["zero_optimization"]


def test_offloaded_adamw_is_declared_so_deepspeed_steps_it_on_the_cpu():
    """ZeRO-Offload raises for a client optimizer (zero_force_ds_cpu_optimizer); declaring AdamW in the config makes
    DeepSpeed build DeepSpeedCPUAdam, and "auto" lets the HF Trainer fill in its own hyper-parameters."""
    ds = deepspeed_config(_plan())
    assert ds["optimizer"] == {"type": "AdamW", "params": {k: "auto" for k in ("lr", "betas", "eps", "weight_decay")}}
    assert "optimizer" not in deepspeed_config(_plan(offload="none"))


def test_solver_offloads_only_optimizers_that_step_on_the_cpu(write_scenario, catalog):
    """bitsandbytes' 8-bit optimizers need CUDA tensors and DeepSpeed's offload only runs its own CPU AdamW:
    no offloaded candidate for them; FSDP offload keeps torch's SGD; a pinned offload is taken as given."""

    def offloads(**training):
        path = write_scenario(f"{'-'.join(map(str, training.values()))}.yaml",
                              training={"framework": "hf", "attention": "flash", **training})  # fmt: skip
        sc = load_scenario(path)
        _, _, _, ev = enumerate_all(sc, catalog, resolve_model(sc, catalog, path), str(path))
        return set(ev.cfg.offload.tolist()) - {0}

    assert offloads(sharding="deepspeed", optimizer="adamw")
    assert not offloads(sharding="deepspeed", optimizer="paged_adamw_8bit")
    assert not offloads(sharding="deepspeed", optimizer="sgd")
    assert offloads(sharding="fsdp", optimizer="sgd")
    assert not offloads(sharding="fsdp", optimizer="adamw_8bit")
    training = {"framework": "hf", "sharding": "deepspeed", "optimizer": "adamw_8bit"}
    pinned = write_scenario("pinned.yaml", plan={"offload": "optimizer"}, training=training)
    sc = load_scenario(pinned)
    _, _, _, ev = enumerate_all(sc, catalog, resolve_model(sc, catalog, pinned), str(pinned))
    assert len(ev) and (ev.cfg.offload != 0).all()


def test_deepspeed_batch_sizes_multiply_to_the_global_batch():
    ds = deepspeed_config(_plan())
    assert (
        ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * 16 == ds["train_batch_size"] == 128
    )


def test_hf_arguments_turn_on_gradient_checkpointing_and_bf16():
    args = hf_arguments(Scenario(**scenario_doc(method="full", lora=None)), _plan())
    assert args["gradient_checkpointing"] is True and args["bf16"] is True and args["fp16"] is False
    assert args["deepspeed"] == "ds_config.json"


def test_fsdp_stage_3_is_full_shard_with_offload():
    fsdp = fsdp_plugin(_plan())
    assert fsdp["fsdp_sharding_strategy"] == "FULL_SHARD" and fsdp["fsdp_offload_params"] is True


def test_multi_node_launch_names_the_rendezvous():
    sc = Scenario(**scenario_doc(method="full", lora=None))
    command = launch_settings(sc, _plan(), cards_per_node=8)["command"]
    assert "--num_processes 16 --num_machines 2" in command and "--main_process_ip" in command


def test_tensor_parallel_plans_carry_a_note():
    sc = Scenario(**scenario_doc(method="full", lora=None))
    notes = launch_settings(sc, _plan(tp=2, dp=8), cards_per_node=8)["notes"]
    assert "tp=2" in notes[0]


def test_hf_plans_use_only_checkpointing_levels_hf_offers():
    # HF transformers recomputes whole layers only (catalogs/calibration.yaml frameworks.checkpointing)
    result = solve_scenario(REPO / "scenarios" / "70b.yaml", top_k=3)
    assert all(e.plan.checkpointing.value in ("none", "full") for e in result.top + result.alternatives)


def test_solve_writes_launch_files(run_cli, tmp_path):
    out = tmp_path / "launch"
    done = run_cli("solve", REPO / "scenarios" / "70b.yaml", "--launch-dir", out)
    assert done.exit_code == 0, done.stderr
    ds = json.loads((out / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] in (1, 2, 3)
    assert "training_arguments" in (out / "launch.yaml").read_text()
