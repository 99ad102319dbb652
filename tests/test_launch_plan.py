"""Launch files and the probe follow the plan: the kernel its GPU runs, its rows of seq_len tokens, what it prices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optimizer.inputs.catalog import load_catalog
from optimizer.inputs.schema import Scenario
from optimizer.inputs.schema_plan import Plan
from optimizer.launch import launch_settings
from optimizer.measure.probe import probe_scenario
from optimizer.solve.planner import solve_scenario

from .conftest import scenario_doc

ENGINES = {"hf": {"framework": "hf"}, "torchtune": {"framework": "torchtune"}, "nemo": {"framework": "nemo"}}


def _plan(**changes) -> Plan:
    base = dict(gpu="V100-32G", offer="x", cards=4, nodes=1, tp=1, pp=1, dp=4, zero_stage=1, offload="none",
                micro_batch=2, grad_accum=4, precision="fp16", optimizer="adamw", checkpointing="full", term="hour",
                billed_units={"hour": 10})  # fmt: skip
    return Plan(**{**base, **changes})


def _scenario(engine: str, **doc) -> Scenario:
    training = {**ENGINES[engine], "attention": "flash", "optimizer": "adamw"}
    return Scenario(**scenario_doc(training=training, **doc))


def _kernels(settings: dict) -> dict[str, str]:
    """Every attention setting a launch directory holds, by engine key."""
    out = {}
    if "from_pretrained" in settings:
        out["hf"] = settings["from_pretrained"]["attn_implementation"]
        out["llamafactory"] = settings["llamafactory.yaml"]["flash_attn"]
    if "nemo" in settings:
        out["nemo"] = settings["nemo"]["transformer_config"]["attention_backend"]
    return out


def test_a_volta_plan_writes_the_sdpa_kernel_it_runs_not_the_requested_flash():
    """The planner sets Plan.attention from the GPU (FlashAttention 2 needs sm80+): the files must say the same."""
    v100 = _plan(attention="sdpa")
    assert _kernels(launch_settings(_scenario("hf"), v100, 8)) == {"hf": "sdpa", "llamafactory": "sdpa"}
    assert _kernels(launch_settings(_scenario("nemo"), v100, 8)) == {"nemo": "auto"}
    h100 = _plan(gpu="H100-SXM", attention="flash", precision="bf16")
    assert _kernels(launch_settings(_scenario("hf"), h100, 8)) == {"hf": "flash_attention_2", "llamafactory": "fa2"}
    # nemo: TransformerEngine cuDNN fused attention, which the time model prices for nemo
    assert _kernels(launch_settings(_scenario("nemo"), h100, 8)) == {"nemo": "fused"}


def test_a_solved_volta_plan_and_its_probe_ask_for_no_flash_attn(write_scenario, tmp_path: Path):
    # the us catalog's Volta card is the PCIe V100 (Akash rents that part); premise: it is a Volta GPU the catalog rents
    catalog = load_catalog(["us"])
    assert catalog.gpus["V100-PCIe-32G"].arch == "volta"
    assert any(o.gpu == "V100-PCIe-32G" for o in catalog.offers)
    path = write_scenario(method="lora", lora={"rank": 16, "alpha": 32, "targets": ["all-linear"]},
                          training={"framework": "hf", "attention": "flash"}, catalog="us",
                          allow={"fp16_for_bf16": True},  # Volta has no bf16: the bf16-published model trains in fp16
                          plan={"gpu": "V100-PCIe-32G", "zero_stage": 0})  # fmt: skip
    result = solve_scenario(path)
    assert result.best.plan.gpu == "V100-PCIe-32G"
    assert result.best.plan.attention.value == "sdpa"
    assert result.launch["from_pretrained"]["attn_implementation"] == "sdpa"
    probe = probe_scenario(path, tmp_path / "probe")
    cfg = json.loads((tmp_path / "probe" / "probe_config.json").read_text())
    assert cfg["attention"] == "sdpa" and "flash-attn" not in probe.packages


@pytest.mark.parametrize("packing", [True, False])
def test_every_engine_writes_rows_of_seq_len_as_the_plan_counts_them(packing):
    data = {"tokens": 2.0e7, "epochs": 1} if packing else {"samples": 10_000, "avg_tokens": 900, "epochs": 1,
                                                                  "packing": False}
    plan = _plan(gpu="H100-SXM", precision="bf16")
    hf = launch_settings(_scenario("hf", seq_len=4096, data=data), plan, 8)
    expected = {"max_length": 4096, "packing": packing} | ({"packing_strategy": "wrapped"} if packing else {})
    assert hf["sft_config"] == expected
    lf = hf["llamafactory.yaml"]
    assert (lf["cutoff_len"], lf["packing"]) == (4096, packing)
    tt = launch_settings(_scenario("torchtune", seq_len=4096, data=data), plan, 8)["torchtune"]
    assert tt["dataset"] == {"packed": packing} and tt["tokenizer"] == {"max_seq_len": 4096}
    nemo = launch_settings(_scenario("nemo", seq_len=4096, data=data), plan, 8)["nemo"]["data"]
    rows = plan.micro_batch * plan.grad_accum * plan.dp  # 32 rows of 4096 tokens per step
    if packing:  # NeMo packs with micro-batch 1 only: 2 rows of 4096 become one of 8192, half as many per step; the
        # dataset cuts each pack (and its cu_seqlens) at seq_length, so that is 8192 too
        assert nemo == {"seq_length": 8192, "micro_batch_size": 1, "global_batch_size": 16,
                        "packed_sequence_specs": {"packed_sequence_size": 8192}}  # fmt: skip
    else:
        assert nemo == {"seq_length": 4096, "micro_batch_size": 2, "global_batch_size": rows}


def test_a_nemo_pack_says_why_its_seq_length_and_global_batch_differ_from_the_plan():
    # seq_length 8192 and global_batch_size 16 against a plan of 4096-token rows and 32 rows a step read as a
    # mistake without a word: the note gives the arithmetic, and the tokens per step it names are the plan's
    # (32 rows x 4,096 = 131,072 = 16 packs x 8,192)
    plan = _plan(gpu="H100-SXM", precision="bf16")  # micro-batch 2, accumulation 4, dp 4: 32 rows a step
    settings = launch_settings(_scenario("nemo", seq_len=4096), plan, 8)
    data = settings["nemo"]["data"]
    notes = [n for n in settings.get("notes", []) if n.startswith("data (packed)")]
    assert len(notes) == 1
    note = notes[0]
    assert f"seq_length {data['seq_length']} = seq_len 4096 x micro_batch 2" in note
    assert f"global_batch_size {data['global_batch_size']} = global batch 32 / 2" in note
    assert "(16 x 8,192 = 32 x 4,096 = 131,072)" in note
    unpacked = _scenario("nemo", seq_len=4096, data={"samples": 10_000, "avg_tokens": 900, "epochs": 1,
                                                     "packing": False})  # fmt: skip
    for sc, p in ((unpacked, plan), (_scenario("nemo", seq_len=4096), _plan(gpu="H100-SXM", micro_batch=1))):
        assert not any(n.startswith("data (packed)") for n in launch_settings(sc, p, 8).get("notes", []))


def test_a_one_gpu_torchtune_offload_pin_is_refused_with_the_field(run_cli, write_scenario):
    """full_finetune_distributed shards, and so offloads, only with two or more data-parallel ranks."""
    path = write_scenario(model="Llama-3.2-3B", method="full", lora=None, training={"framework": "torchtune"},
                          catalog="us", plan={"gpu": "H100-SXM", "cards": 1, "zero_stage": 3, "offload": "all"})
    result = run_cli("solve", path)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "plan.offload" in result.stderr and "2 or more data-parallel ranks" in result.stderr
    two = write_scenario("two.yaml", model="Llama-3.2-3B", method="full", lora=None, catalog="us",
                         training={"framework": "torchtune"}, plan={"gpu": "H100-SXM", "zero_stage": 3,
                                                                    "offload": "all"})  # fmt: skip
    best = solve_scenario(two).best.plan
    assert best.offload.value == "all" and best.dp >= 2
    assert solve_scenario(two).launch["torchtune"]["fsdp_cpu_offload"] is True


def test_the_probe_of_an_sgd_offload_plan_keeps_sgd(write_scenario, tmp_path: Path):
    """The probe's DeepSpeed config is the launch's: no AdamW declared for an SGD plan, and accelerate told not to
    swap the client optimizer for DeepSpeedCPUAdam (zero_force_ds_cpu_optimizer false)."""
    path = write_scenario(training={"framework": "hf", "sharding": "deepspeed", "optimizer": "sgd"}, catalog="us",
                          method="full", lora=None,
                          plan={"gpu": "H100-SXM", "zero_stage": 2, "offload": "optimizer"})  # fmt: skip
    probe_scenario(path, tmp_path)
    cfg = json.loads((tmp_path / "probe_config.json").read_text())
    ds = cfg["deepspeed"]
    assert cfg["optimizer"] == "sgd" and "optimizer" not in ds and ds["zero_force_ds_cpu_optimizer"] is False
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert ds["train_micro_batch_size_per_gpu"] * cfg["cards"] == ds["train_batch_size"]  # accumulation 1


def test_the_axolotl_export_follows_the_plan():
    """Axolotl 0.19 names (utils/schemas): attn_implementation from the GPU's kernel, the plan's rows, batch,
    precision, adapter and sharding."""
    lora = {"rank": 16, "alpha": 32, "targets": ["q_proj", "v_proj"], "dropout": 0.1}
    sc = Scenario(**scenario_doc(method="qlora", lora=lora, seq_len=4096,
                                 training={"framework": "hf", "sharding": "fsdp", "attention": "flash"}))  # fmt: skip
    ax = launch_settings(sc, _plan(attention="sdpa", zero_stage=3), 8)["axolotl.yaml"]
    assert (ax["adapter"], ax["load_in_4bit"], ax["lora_r"], ax["lora_alpha"], ax["lora_target_modules"]) == (
        "qlora", True, 16, 32, ["q_proj", "v_proj"])  # fmt: skip
    assert (ax["sequence_len"], ax["sample_packing"], ax["micro_batch_size"], ax["gradient_accumulation_steps"]) == (
        4096, True, 2, 4)  # fmt: skip
    assert ax["attn_implementation"] == "sdpa" and (ax["fp16"], ax["bf16"]) == (True, False)
    assert ax["fsdp_version"] == 2 and ax["fsdp_config"]["reshard_after_forward"] is True
    assert "cpu_ram_efficient_loading" not in ax["fsdp_config"]  # Axolotl refuses it with a 4-bit base under FSDP2
    assert "deepspeed" not in ax
    full = Scenario(**scenario_doc(method="full", lora=None, training={"framework": "hf", "attention": "flash"}))
    ds = launch_settings(full, _plan(gpu="H100-SXM", attention="flash", precision="bf16", offload="optimizer"), 8)
    ax = ds["axolotl.yaml"]
    assert "adapter" not in ax and ax["deepspeed"] == "ds_config.json" and "optimizer" not in ax  # DeepSpeed's Adam
    assert ax["attn_implementation"] == "flash_attention_2" and ax["bf16"] is True
    assert ds["axolotl"]["command"] == "torchrun --nnodes 1 --nproc_per_node 4 -m axolotl.cli.train axolotl.yaml"
