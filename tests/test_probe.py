"""``ftopt probe``: the trial it chooses, its cost and the files it writes (no torch; tests_real/ runs the script)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from optimizer.inputs.catalog import load_scenario
from optimizer.inputs.measurement import parse_cases
from optimizer.inputs.schema import Scenario
from optimizer.inputs.yamlio import validate
from optimizer.launch.fsdp_args import fsdp_plugin
from optimizer.measure import probe_script
from optimizer.measure.probe import probe_scenario
from optimizer.solve.planner import estimate_scenario, solve_scenario
from tests.conftest import REPO, seventy_b

SEVEN_B = REPO / "scenarios" / "7b-lora.yaml"
SEVENTY_B = seventy_b()


@pytest.fixture(scope="module")
def seven_b_zero0(tmp_path_factory) -> Path:
    """7B LoRA pinned to a plan without ZeRO (one card reproduces it): the premise of the tests that use it, stated
    rather than left to whichever plan the solver prefers today."""
    scenario = tmp_path_factory.mktemp("scenario") / "7b-lora-zero0.yaml"
    scenario.write_text(SEVEN_B.read_text() + "plan: {zero_stage: 0}\n")
    return scenario


@pytest.fixture(scope="module")
def probe_7b(tmp_path_factory, seven_b_zero0):
    out = tmp_path_factory.mktemp("probe7b")
    return probe_scenario(seven_b_zero0, out), json.loads((out / "probe_config.json").read_text())


@pytest.fixture(scope="module")
def probe_70b(tmp_path_factory):
    # offload pinned to the optimizer states: with the parameters on the host too, one card would hold the trial
    out = tmp_path_factory.mktemp("probe70b")
    doc = yaml.safe_load(SEVENTY_B.read_text(encoding="utf-8"))
    doc["plan"] = {**(doc.get("plan") or {}), "offload": "optimizer"}
    path = out / "70b-optimizer-offload.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return probe_scenario(path, out), json.loads((out / "probe_config.json").read_text())


def test_the_trial_keeps_the_plans_per_gpu_configuration(probe_7b):
    probe, cfg = probe_7b
    p, t = probe.plan.plan, probe.trial.plan
    assert (t.gpu, t.offer, t.micro_batch, t.checkpointing, t.precision, t.zero_stage, t.offload) == (
        p.gpu, p.offer, p.micro_batch, p.checkpointing, p.precision, p.zero_stage, p.offload)  # fmt: skip
    assert t.grad_accum == 1 and t.cards == 1  # no ZeRO: one card reproduces everything per GPU
    seq_len = load_scenario(SEVEN_B).seq_len
    assert (cfg["micro_batch"], cfg["seq_len"], cfg["checkpointing"]) == (p.micro_batch, seq_len,
                                                                           p.checkpointing.value)  # fmt: skip
    assert cfg["scenario"]["seq_len"] == seq_len


def test_a_zero_plan_is_probed_on_the_fewest_cards_that_fit(probe_70b, tmp_path: Path):
    probe, cfg = probe_70b
    p, t = probe.plan.plan, probe.trial.plan
    assert p.zero_stage == 3 and t.zero_stage == 3
    assert t.cards <= p.dp and p.dp % t.cards == 0 and probe.trial.memory.fits
    assert cfg["cards"] == t.cards and cfg["zero_stage"] == 3 and cfg["sharding"] == "deepspeed"
    assert t.cards > 1  # 70B full fine-tuning with its parameters on the GPUs does not fit one card
    half = dict(cfg["scenario"], global_batch=cfg["micro_batch"] * t.cards // 2)
    half["plan"] = dict(half["plan"], cards=t.cards // 2)
    path = tmp_path / "half.yaml"
    path.write_text(json.dumps(half))
    assert not estimate_scenario(path, {}).memory.fits


def test_the_trial_is_billed_by_the_hour_for_warm_up_and_measured_steps(probe_7b):
    probe, _ = probe_7b
    t = probe.trial
    assert t.plan.term in ("hour", "minute", "second")  # the hourly price, in the offer's increments
    assert t.time.steps == probe.steps + probe.warmup
    assert 0 < t.cost.total < probe.plan.cost.total


def test_the_price_of_a_ten_percent_time_error_is_shown(probe_7b):
    probe, _ = probe_7b
    cost = probe.plan.cost.total
    assert 0 < probe.worth <= 0.11 * cost + 1.0, (probe.worth, cost)
    line = next(x for x in probe.lines() if x.startswith("probe: "))
    assert f"a 10% time error on this plan is worth {probe.worth:,.2f}" in line
    assert line.startswith(f"probe: 1 x {probe.plan.plan.gpu} for ")


def test_a_time_error_worth_nothing_says_why_and_no_checkpointing_reads_as_words(tmp_path: Path):
    # 14B LoRA on 8 x A800 by the hour: 10% more compute stays inside the hours billed; it printed "worth 0.00 CNY"
    # beside a 20.60 CNY trial, and "none checkpointing"
    probe = probe_scenario(REPO / "scenarios" / "14b-lora.yaml", tmp_path)
    lines = probe.lines()
    text = " ".join(" ".join(lines).split())
    assert probe.worth == 0 and "worth 0.00 CNY (the longer run stays inside the billing units already paid)" in text
    if probe.plan.plan.checkpointing.value == "none":
        assert "no checkpointing" in lines[0] and "none checkpointing" not in " ".join(lines)


def test_the_probe_writes_its_script_and_config(tmp_path: Path):
    probe_scenario(SEVEN_B, tmp_path)
    assert (tmp_path / "probe.py").read_text() == Path(probe_script.__file__).read_text()
    cfg = json.loads((tmp_path / "probe_config.json").read_text())
    assert cfg["model"]["num_hidden_layers"] == 32 and cfg["model"]["family"] == "llama"


def test_the_measurement_scenario_is_a_valid_case_that_estimate_accepts(probe_7b, tmp_path: Path):
    _, cfg = probe_7b
    doc = {"id": cfg["id"], "scenario": cfg["scenario"], "measured": {"step_seconds": 1.0}}
    (case,) = parse_cases(doc, "probe")
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(case.scenario))
    assert estimate_scenario(path, {}).plan.cards == cfg["cards"]


def test_the_tiny_scenario_describes_what_the_cpu_run_trains(probe_7b):
    _, cfg = probe_7b
    tiny = probe_script.tiny_config(cfg)
    doc = probe_script.tiny_scenario(tiny, 4)
    sc = validate(Scenario, doc, "tiny")
    assert (sc.model.layers, sc.model.hidden, sc.seq_len) == (2, 64, 64)
    assert sc.model.heads % sc.model.kv_heads == 0 and sc.plan.cards == 1 and sc.plan.zero_stage == 0
    assert sc.global_batch == tiny["micro_batch"] and sc.data.total_tokens == 4 * tiny["micro_batch"] * 64


def test_deepspeed_settings_follow_the_plan(probe_70b):
    probe, cfg = probe_70b
    ds = probe_script.ds_config(cfg)
    t = probe.trial.plan
    assert ds["zero_optimization"]["stage"] == t.zero_stage == 3
    offloaded = ds["zero_optimization"].get("offload_optimizer", {}).get("device")
    assert offloaded == ("cpu" if t.offload.value != "none" else None)
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (t.micro_batch, 1)
    assert probe_script.ds_config({**cfg, "zero_stage": 0}) is None
    assert probe_script.fsdp_args(cfg) == {}


@pytest.mark.parametrize("method,reentrant", [("qlora", True), ("lora", False)])
def test_the_probe_recomputes_with_the_launchs_use_reentrant(tmp_path: Path, method: str, reentrant: bool):
    # the probe always ran use_reentrant false while the launch sets true for QLoRA under FSDP (PEFT's scripts), so
    # it measured another configuration's memory than the one launched
    doc = yaml.safe_load(SEVEN_B.read_text())
    doc.update(method=method, plan={"zero_stage": 3, "cards": 2, "checkpointing": "full"})
    doc["training"] = {**doc.get("training", {}), "sharding": "fsdp"}
    path = tmp_path / f"7b-{method}-fsdp.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    probe_scenario(path, tmp_path / "out")
    cfg = json.loads((tmp_path / "out" / "probe_config.json").read_text())
    assert cfg["use_reentrant"] is reentrant  # probe.py passes it to checkpointing_args (tests_real runs it)


@pytest.mark.parametrize("method,sharding,zero,loaded", [("lora", "fsdp", 3, "float32"), ("full", "fsdp", 3, "float32"),
                                                            ("lora", "deepspeed", 0, "bfloat16"),
                                                            ("full", "deepspeed", 3, None)])  # fmt: skip
def test_the_probe_loads_the_model_in_the_launchs_dtype(tmp_path: Path, method: str, sharding: str, zero: int,
                                                        loaded: str | None):  # fmt: skip
    """The probe builds the model in the dtype the launch loads it in (hf_args.load_dtype): a LoRA base under FSDP in
    fp32, as hf_fsdp prices it, where the probe built it in 16 bits and measured a smaller run than the one priced;
    under DeepSpeed the engine casts, and the probe keeps its own rule (fp32 for full fine-tuning)."""
    doc = yaml.safe_load(SEVEN_B.read_text())
    doc.update(method=method, plan={"zero_stage": zero, "cards": 2, "checkpointing": "full", "offload": "none"})
    doc["training"] = {**doc.get("training", {}), "sharding": sharding}
    if method == "full":
        doc.pop("lora", None)
    path = tmp_path / f"7b-{method}-{sharding}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    probe_scenario(path, tmp_path / "out")
    cfg = json.loads((tmp_path / "out" / "probe_config.json").read_text())
    assert cfg["load_dtype"] == loaded


def test_an_fsdp_probe_runs_the_launchs_fsdp_settings(tmp_path: Path):
    """The probe's FSDP is the launch's (fsdp_args.fsdp_plugin): FSDP1, its sharding strategy and use_orig_params
    false for LoRA, where the Trainer alone would run FSDP2 with use_orig_params true."""
    path = tmp_path / "7b-lora-fsdp.yaml"
    path.write_text(SEVEN_B.read_text() + "plan: {zero_stage: 3, cards: 2}\n")
    doc = yaml.safe_load(path.read_text())
    doc["training"] = {**doc.get("training", {}), "sharding": "fsdp"}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    probe = probe_scenario(path, tmp_path / "out")
    cfg = json.loads((tmp_path / "out" / "probe_config.json").read_text())
    assert cfg["fsdp"] == fsdp_plugin(load_scenario(path), probe.trial.plan)
    config = probe_script.fsdp_args(cfg)["fsdp_config"]
    assert (config["version"], config["reshard_after_forward"], config["use_orig_params"]) == (1, "full_shard", False)
    assert config["transformer_layer_cls_to_wrap"] == ["LlamaDecoderLayer"]
    assert probe_script.trainer_recomputes(cfg) == (cfg["checkpointing"] != "none")  # LoRA: the Trainer recomputes


def test_a_tensor_parallel_plan_is_refused_with_one_line(run_cli, write_scenario, tmp_path: Path):
    # nemo runs tensor parallelism (hf would refuse tp=2 itself); the probe, which runs HF, must refuse it
    path = write_scenario(plan={"gpu": "A100-80G", "cards": 2, "tp": 2},
                          training={"framework": "nemo", "optimizer": "adamw", "attention": "flash"})
    result = run_cli("probe", path, "--out", tmp_path / "p")
    assert result.exit_code == 2 and "the probe runs data parallel only" in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "p").exists()


def test_an_infeasible_scenario_has_no_plan_to_probe_exit_1_as_solve(run_cli, write_scenario, tmp_path: Path):
    # it exited 2 (bad input), though the exit table puts an infeasible scenario under 1 and solve exits 1
    path = write_scenario(budget={"amount": 0.01, "currency": "USD"})
    assert run_cli("solve", path).exit_code == 1
    result = run_cli("probe", path, "--out", tmp_path / "p")
    assert result.exit_code == 1 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    says = "no plan to probe: the scenario is infeasible (ftopt solve says why)"
    assert result.stderr == f"ftopt: error: {path}: {says}\n"
    assert not (tmp_path / "p").exists()


def test_probe_cli_prints_cost_and_next_steps(run_cli, tmp_path: Path, seven_b_zero0):
    result = run_cli("probe", seven_b_zero0, "--out", tmp_path / "p", "--steps", "10")
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "probe: 1 x " in text and "time error on this plan is worth" in text
    assert f"ftopt calibrate {tmp_path / 'p'}/measurement.yaml" in text


def test_solve_and_probe_agree_on_the_plan(probe_7b, seven_b_zero0):
    probe, _ = probe_7b
    assert probe.plan == solve_scenario(seven_b_zero0).best


def test_an_offer_without_an_hourly_price_bills_the_trial_by_its_shortest_term(write_scenario, tmp_path: Path):
    path = write_scenario(catalog="us", plan={"offer": "aws-capacity-block-p5-h100"})
    probe = probe_scenario(path, tmp_path / "p")
    assert probe.trial.plan.term == "day" and probe.trial.plan.billed_units == {"day": 1}
    assert any("billed by day" in line for line in probe.lines())


def test_a_multi_card_trial_runs_exactly_its_warm_up_and_measured_steps(probe_70b):
    # The trial shards over t.cards > 1 cards with grad_accum 1: one step takes micro_batch x cards sequences of
    # seq_len tokens, so warm-up + measured steps need that many tokens and the time model counts exactly them.
    probe, cfg = probe_70b
    t = probe.trial
    assert t.plan.cards > 1 and t.plan.grad_accum == 1 and t.plan.dp == t.plan.cards
    doc = cfg["scenario"]
    assert doc["global_batch"] == t.plan.micro_batch * t.plan.cards
    assert doc["data"]["tokens"] == (probe.steps + probe.warmup) * t.plan.micro_batch * t.plan.cards * doc["seq_len"]
    assert t.time.steps == probe.steps + probe.warmup


def test_the_probe_states_the_host_ram_its_run_takes(probe_70b):
    """70B full fine-tuning under ZeRO-3: the weights are partitioned as created on the GPUs, so the host holds the
    processes and the offloaded optimizer states only; under FSDP rank 0 would hold one fp32 copy (4 B/param)."""
    from optimizer.inputs.catalog import load_catalog, resolve_model
    from optimizer.measure.probe import probe_host_ram

    probe, cfg = probe_70b
    catalog = load_catalog()
    per_rank = catalog.calibration["hosts"]["host_ram_per_rank_gib"]
    offload = probe.trial.memory.cpu_offload
    assert probe.host_ram == cfg["cards"] * per_rank * 2**30 + offload
    arch = resolve_model(load_scenario(SEVENTY_B), catalog, SEVENTY_B)  # the same model as the pinned copy
    fsdp = probe_host_ram({**cfg, "sharding": "fsdp"}, arch, probe.trial, per_rank)
    assert fsdp - probe.host_ram == 4 * arch.total_params
    line = next(x for x in probe.lines() if "host RAM" in x)
    assert f"{probe.host_ram / 2**30:,.1f} GiB of host RAM" in line and "no model files" in line


def test_the_probe_steps_the_adamw_kernel_the_plan_is_priced_with(probe_7b):
    # the measurement runs the optimizer the launch files ask for (hf_args.hf_optim): fused AdamW unless the scenario
    # says foreach; before, it stepped torch's foreach default while the plan was priced fused
    _, cfg = probe_7b
    assert cfg["optimizer"] == "adamw" and cfg["optimizer_kernel"] == "fused"
    assert probe_script.trainer_optim(cfg, "cuda") == ("adamw_torch_fused", [])
    assert probe_script.trainer_optim({**cfg, "optimizer_kernel": "foreach"}, "cuda") == ("adamw_torch", [])
    optim, notes = probe_script.trainer_optim({**cfg, "optimizer": "paged_adamw_8bit"}, "cpu")
    assert optim == "adamw_torch" and "needs bitsandbytes on CUDA" in notes[0]


def test_probe_py_without_its_packages_says_what_to_install(probe_70b, tmp_path: Path):
    """probe.py where torch & co. are missing (python -S: no site-packages) is one line with the pip install of the
    packages probe_config.json lists and exit status 2, not a ModuleNotFoundError traceback."""
    import subprocess
    import sys

    _, cfg = probe_70b
    assert cfg["packages"][:5] == ["torch", "transformers", "peft", "accelerate", "pyyaml"]
    assert "deepspeed" in cfg["packages"]  # the 70B plan shards with ZeRO: the GPU run needs it
    (tmp_path / "probe.py").write_text(Path(probe_script.__file__).read_text())
    (tmp_path / "probe_config.json").write_text(json.dumps(cfg))
    for args, install in ((["--tiny"], "torch transformers peft accelerate pyyaml"),
                          ([], " ".join(cfg["packages"]))):  # fmt: skip
        proc = subprocess.run([sys.executable, "-S", str(tmp_path / "probe.py"), *args], capture_output=True,
                              text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        line = proc.stderr.strip()
        assert "\n" not in line and "Traceback" not in line, proc.stderr
        assert line.startswith("probe.py: error: torch, ") and line.endswith(f"pip install {install}"), line
        assert ("deepspeed" in line) is (not args), line  # the CPU smoke run does not ask for DeepSpeed


def test_a_qlora_probe_that_offloads_counts_each_ranks_whole_4_bit_base_on_the_host(tmp_path: Path):
    """probe.py quantises the whole NF4 base on every rank and, offloading, keeps it on the host until FSDP shards
    it: the host RAM it prints counts one copy per rank (it had counted none: 75.8 GiB printed, about 220 needed)."""
    from optimizer.measure.probe import kbit_base_bytes

    probe = probe_scenario(REPO / "scenarios" / "70b-qlora.yaml", tmp_path / "out")
    cfg = json.loads((tmp_path / "out" / "probe_config.json").read_text())
    assert cfg["method"] == "qlora" and cfg["offload"] == "all" and cfg["sharding"] == "fsdp" and cfg["cards"] > 1
    sc = load_scenario(REPO / "scenarios" / "70b-qlora.yaml")
    from optimizer.inputs.catalog import load_catalog, resolve_model

    catalog = load_catalog()
    base = kbit_base_bytes(sc, resolve_model(sc, catalog, REPO / "scenarios" / "70b-qlora.yaml"), catalog.calibration)
    assert 34 * 2**30 < base < 40 * 2**30  # Llama-3.1-70B in NF4 with 16-bit embeddings and norms
    assert probe.host_ram >= cfg["cards"] * base
    assert any(n.startswith("probe.py quantises the whole 4-bit base on every rank") for n in probe.notes)
