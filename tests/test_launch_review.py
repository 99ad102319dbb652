"""What every launch file must say for the run to be the priced one: run length, checkpoints kept, schedule,
LoRA targets beside all-linear, FSDP's reduce per micro-batch, use_reentrant, NeMo's offload, DeepSpeed's buckets."""

from __future__ import annotations

import math

from optimizer.inputs.catalog import load_catalog
from optimizer.inputs.schema import Scenario
from optimizer.inputs.schema_plan import Plan
from optimizer.launch import deepspeed_config, launch_settings
from optimizer.launch.nemo_cfg import optimizer_config
from optimizer.measure import probe_script
from optimizer.solve.planner import solve_scenario

from .conftest import REPO, scenario_doc

HF_FILES = ("training_arguments", "llamafactory.yaml", "axolotl.yaml")


def _plan(**changes) -> Plan:
    base = dict(gpu="A100-80G", offer="x", cards=8, nodes=1, tp=1, pp=1, dp=8, zero_stage=3, offload="none",
                micro_batch=2, grad_accum=4, precision="bf16", optimizer="adamw", checkpointing="full", term="hour",
                billed_units={"hour": 10})  # fmt: skip
    return Plan(**{**base, **changes})


def _scenario(method: str = "lora", targets: list[str] | None = None, epochs: float = 1, **training) -> Scenario:
    lora = None if method == "full" else {"rank": 16, "alpha": 32, "targets": targets or ["all-linear"]}
    training = {k: v for k, v in {"framework": "hf", **training}.items() if v is not None}
    doc = scenario_doc(method=method, lora=lora, training=training)
    doc["data"] = {**doc["data"], "epochs": epochs}
    return Scenario(**doc)


def test_every_file_trains_the_steps_the_plan_is_priced_for():
    """The solve passes time.steps: HF, LLaMA-Factory and Axolotl max_steps (their defaults train 3 or 1 epochs)."""
    result = solve_scenario(REPO / "scenarios" / "7b-lora.yaml")
    steps, launch = result.best.time.steps, result.launch
    assert steps > 0 and launch is not None
    assert [launch[k]["max_steps"] for k in HF_FILES] == [steps] * 3
    assert any(n.startswith(f"run length: {steps} optimizer steps") for n in launch["notes"])


def test_the_run_length_note_gives_the_step_count_of_the_plans_rows():
    """Packed: ceil(tokens / (seq_len x global batch)); one sample per row: ceil(samples x epochs / global batch)."""
    packed = launch_settings(_scenario(), _plan(), 8, steps=100)["notes"]
    assert any("the plan's ceil(tokens / (seq_len x global batch))" in n for n in packed)
    doc = _scenario().model_dump(mode="json", exclude_none=True)
    doc["data"] = {"samples": 3200, "avg_tokens": 500, "epochs": 1, "packing": False}
    padded = launch_settings(Scenario(**doc), _plan(), 8, steps=100)["notes"]
    assert any("the plan's ceil(samples x epochs / global batch)" in n for n in padded)


def test_torchtune_counts_epochs_and_nemo_trainer_steps():
    """torchtune: ceil(data.epochs) epochs of ceil(steps / epochs) optimizer steps; NeMo: trainer.max_steps."""
    tt = launch_settings(_scenario(epochs=2.5, sharding=None, framework="torchtune"), _plan(), 8, steps=1001)
    assert (tt["torchtune"]["epochs"], tt["torchtune"]["max_steps_per_epoch"]) == (3, math.ceil(1001 / 3))
    nemo = launch_settings(_scenario("full", sharding=None, framework="nemo"), _plan(zero_stage=1), 8, steps=1001)
    assert nemo["nemo"]["trainer"] == {"max_steps": 1001}


def test_the_files_keep_the_checkpoints_the_disk_check_counts():
    """save_total_limit (NeMo save_top_k) = calibration hosts.checkpoints_kept, read from the catalog the solve used."""
    kept = int(load_catalog().calibration["hosts"]["checkpoints_kept"])
    launch = solve_scenario(REPO / "scenarios" / "7b-lora.yaml").launch
    assert [launch[k]["save_total_limit"] for k in HF_FILES] == [kept] * 3
    nemo = launch_settings(_scenario("full", sharding=None, framework="nemo"), _plan(zero_stage=1), 8, save_steps=50,
                           checkpoints_kept=kept)  # fmt: skip
    assert nemo["nemo"]["checkpoint"] == {"every_n_train_steps": 50, "save_top_k": kept}


def test_one_learning_rate_schedule_in_every_hf_format_file():
    """transformers' linear with no warm-up; Axolotl defaults to cosine with 3% warm-up unless told."""
    s = launch_settings(_scenario(), _plan(), 8)
    for key in ("training_arguments", "llamafactory.yaml"):
        assert (s[key]["lr_scheduler_type"], s[key]["warmup_steps"]) == ("linear", 0)
    assert (s["axolotl.yaml"]["lr_scheduler"], s["axolotl.yaml"]["warmup_steps"]) == ("linear", 0)


def test_all_linear_with_lm_head_names_the_projections_and_the_output_layer():
    """PEFT's all-linear leaves the output layer out, and a list holding "all-linear" names no module: written out."""
    s = launch_settings(_scenario(targets=["all-linear", "lm_head"]), _plan(zero_stage=0, dp=8), 8)
    names = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
    assert s["lora_config"]["target_modules"] == names
    assert s["llamafactory.yaml"]["lora_target"] == ",".join(names)
    assert s["axolotl.yaml"]["lora_target_modules"] == names and "lora_target_linear" not in s["axolotl.yaml"]
    tt_scenario = _scenario(targets=["all-linear", "lm_head"], sharding=None, framework="torchtune")
    tt = launch_settings(tt_scenario, _plan(), 8)
    assert tt["torchtune"]["model"]["apply_lora_to_output"] is True
    assert probe_script.peft_modules({"peft_targets": s["lora_config"]}) == names
    plain = launch_settings(_scenario(targets=["all-linear"]), _plan(zero_stage=0, dp=8), 8)
    assert plain["lora_config"]["target_modules"] == "all-linear"


def test_fsdp_reduce_per_micro_batch_reaches_llamafactory_and_axolotl():
    sync = {"gradient_accumulation_kwargs": {"sync_each_batch": True}}
    s = launch_settings(_scenario("full", sharding="fsdp", reduce_every_micro_batch=True), _plan(), 8)
    assert [s[k].get("accelerator_config") for k in HF_FILES] == [sync] * 3
    off = launch_settings(_scenario("full", sharding="fsdp"), _plan(), 8)
    assert not any("accelerator_config" in off[k] for k in HF_FILES)


def test_llamafactory_recomputes_with_the_hf_files_use_reentrant():
    """LLaMA-Factory's use_reentrant_gc defaults to True; LoRA under ZeRO-3 runs non-reentrant, QLoRA reentrant."""
    lora = launch_settings(_scenario(sharding="deepspeed"), _plan(), 8)
    assert lora["llamafactory.yaml"]["use_reentrant_gc"] is False
    assert lora["training_arguments"]["activation_checkpointing_kwargs"] == {"use_reentrant": False}
    qlora = launch_settings(_scenario("qlora", sharding="deepspeed"), _plan(), 8)
    assert qlora["llamafactory.yaml"]["use_reentrant_gc"] is True
    full = launch_settings(_scenario("full", sharding="deepspeed"), _plan(), 8)
    assert full["llamafactory.yaml"]["use_reentrant_gc"] is False  # transformers 5's default for the HF file


def test_nemo_optimizer_offload_is_precision_aware():
    """Megatron-LM refuses optimizer_cpu_offload without use_precision_aware_optimizer (Adam only in megatron-core)."""
    assert optimizer_config(_plan(zero_stage=1, offload="optimizer"))["use_precision_aware_optimizer"] is True
    assert "use_precision_aware_optimizer" not in optimizer_config(_plan(zero_stage=1))
    sgd = optimizer_config(_plan(zero_stage=1, offload="optimizer", optimizer="sgd"))
    assert "use_precision_aware_optimizer" not in sgd


def test_deepspeed_buckets_are_the_auto_sizes_the_memory_model_prices():
    """reduce_bucket_size "auto" (h x h) at every stage, the ZeRO-3 prefetch and persistence "auto" too; DeepSpeed's
    defaults (5e8 elements, two reduce buffers) are 2-4 GB where the model prices 1 GB."""
    z2 = deepspeed_config(_plan(zero_stage=2))["zero_optimization"]
    assert z2["reduce_bucket_size"] == "auto" and "stage3_prefetch_bucket_size" not in z2
    z3 = deepspeed_config(_plan(zero_stage=3))["zero_optimization"]
    auto = ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold")
    assert all(z3[k] == "auto" for k in auto)


def test_an_hf_fp8_plan_trains_in_bf16_where_no_fp8_switch_exists_and_says_so():
    # ds_config.json had only {"fp16": {"enabled": false}} and TrainingArguments bf16 false: DeepSpeed trained in fp32
    plan = _plan(precision="fp8", gpu="H100-SXM")
    settings = launch_settings(_scenario(method="full", sharding="deepspeed"), plan, 8)
    ds = deepspeed_config(plan)
    assert ds["bf16"] == {"enabled": True} and "fp16" not in ds
    assert settings["training_arguments"]["bf16"] is True and settings["llamafactory.yaml"]["bf16"] is True
    assert settings["axolotl.yaml"]["fp8"] is True and settings["axolotl.yaml"]["bf16"] is True
    assert any(n.startswith("fp8: axolotl.yaml trains the fp8 matmuls") for n in settings["notes"])
    fsdp = launch_settings(_scenario(method="full", sharding="fsdp"), plan, 8)
    assert "--mixed_precision bf16" in fsdp["command"]  # the Trainer sets it from bf16 anyway
    bf16 = launch_settings(_scenario(method="full", sharding="deepspeed"), _plan(), 8)
    assert not any(n.startswith("fp8:") for n in bf16["notes"])


def test_an_moe_model_under_zero_3_is_told_to_gather_its_moe_blocks_whole():
    catalog = load_catalog()
    sc = _scenario(sharding="deepspeed")
    moe = launch_settings(sc, _plan(), 8, arch=catalog.model("Mixtral-8x7B"))
    assert any("set_z3_leaf_modules" in n for n in moe["notes"])
    dense = launch_settings(sc, _plan(), 8, arch=catalog.model("Llama-3.1-8B"))
    assert not any("set_z3_leaf_modules" in n for n in dense["notes"])
    zero2 = launch_settings(sc, _plan(zero_stage=2), 8, arch=catalog.model("Mixtral-8x7B"))
    assert not any("set_z3_leaf_modules" in n for n in zero2["notes"])


def test_the_loss_the_memory_is_priced_with_is_asked_for_or_its_absence_said():
    # training.loss: fused fitted 8B full fine-tuning at 32K (47 GiB of fp32 logits less), but no file asked for Liger
    fused = launch_settings(_scenario(method="full", sharding="deepspeed", loss="fused"), _plan(), 8)
    assert fused["training_arguments"]["use_liger_kernel"] is True
    assert fused["llamafactory.yaml"]["enable_liger_kernel"] is True
    assert fused["axolotl.yaml"]["plugins"] == ["axolotl.integrations.liger.LigerPlugin"]
    assert fused["axolotl.yaml"]["liger_fused_linear_cross_entropy"] is True
    assert any("pip install liger-kernel" in n for n in fused["notes"])
    chunked = launch_settings(_scenario(method="full", sharding="deepspeed", loss="chunked"), _plan(), 8)
    assert "use_liger_kernel" not in chunked["training_arguments"]
    assert any(n.startswith("loss chunked: priced as asked, but these files cannot ask hf") for n in chunked["notes"])
    plain = launch_settings(_scenario(method="full", sharding="deepspeed"), _plan(), 8)
    assert "use_liger_kernel" not in plain["training_arguments"] and not any("loss" in n for n in plain["notes"])
    tt = launch_settings(_scenario(method="full", framework="torchtune", sharding="fsdp", loss="standard"), _plan(), 8)
    assert tt["torchtune"]["loss"] == {"_component_": "torch.nn.CrossEntropyLoss"}
    nemo = launch_settings(_scenario(method="full", framework="nemo", sharding=None, loss="fused"),
                           _plan(zero_stage=1), 8)  # fmt: skip
    assert any(n.startswith("loss fused: priced as asked") for n in nemo["notes"])


def test_an_fp32_reduce_dtype_is_said_to_be_the_loops_own():
    # training.reduce_dtype prices FSDP2's accumulation dtype (KempnerForge-style loops); no launch file sets it
    fp32 = launch_settings(_scenario(method="full", framework="torchtune", sharding="fsdp", reduce_dtype="fp32"),
                           _plan(), 8)  # fmt: skip
    assert any(n.startswith("reduce_dtype fp32: priced as asked") for n in fp32["notes"])
    plain = launch_settings(_scenario(method="full", framework="torchtune", sharding="fsdp"), _plan(), 8)
    assert not any("reduce_dtype" in n for n in plain.get("notes", []))


def test_axolotl_fp8_under_fsdp_leaves_cpu_ram_efficient_loading_off():
    # accelerate raises at Accelerator() for torchao fp8 with FSDP2 and cpu_ram_efficient_loading (accelerator.py)
    fp8 = launch_settings(_scenario(method="full", sharding="fsdp"), _plan(precision="fp8", gpu="H100-SXM"), 8)
    assert fp8["axolotl.yaml"]["fp8"] is True and "cpu_ram_efficient_loading" not in fp8["axolotl.yaml"]["fsdp_config"]
    bf16 = launch_settings(_scenario(method="full", sharding="fsdp"), _plan(), 8)
    assert bf16["axolotl.yaml"]["fsdp_config"]["cpu_ram_efficient_loading"] is True


def test_nemo_fp8_megatron_fsdp_and_attention_run_as_priced():
    # a second review of the NeMo settings: fp8 on the model config alone is overwritten by the bf16 plugin; Megatron
    # FSDP raises with the default torch_dist checkpoints; "flash" turns off the cuDNN attention the model prices
    sc = _scenario(method="full", framework="nemo", sharding=None)
    fp8 = launch_settings(sc, _plan(precision="fp8", gpu="H100-SXM", zero_stage=3), 8)
    nemo = fp8["nemo"]
    assert nemo["precision_plugin"] == "bf16_with_fp8_mixed" and any(n.startswith("fp8: use ") for n in fp8["notes"])
    assert nemo["strategy"]["fsdp"] == "megatron" and nemo["strategy"]["save_ckpt_format"] == "fsdp_dtensor"
    assert nemo["transformer_config"]["gradient_accumulation_fusion"] is False
    assert nemo["transformer_config"]["attention_backend"] == "fused"
    zero1 = launch_settings(sc, _plan(zero_stage=1), 8)["nemo"]
    assert "fsdp" not in zero1["strategy"] and "precision_plugin" not in zero1
    assert "gradient_accumulation_fusion" not in zero1["transformer_config"]


def test_torchtune_removes_fused_for_optimizers_without_it():
    # the recipe configs' optimizer block has fused: True, which a bitsandbytes or Adafactor override keeps
    sc = _scenario(framework="torchtune", sharding="fsdp")
    paged = launch_settings(sc, _plan(optimizer="paged_adamw_8bit"), 8)
    assert paged["command"].endswith(" ~optimizer.fused")
    ada = launch_settings(sc, _plan(optimizer="adafactor"), 8)
    assert ada["command"].endswith(" ~optimizer.fused") and ada["torchtune"]["optimizer"]["relative_step"] is False
    adamw = launch_settings(sc, _plan(), 8)
    assert "~optimizer.fused" not in adamw["command"] and adamw["torchtune"]["optimizer"]["fused"] is True
