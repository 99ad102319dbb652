"""The solver proposes only what the engine can launch (optimizer/models/engines.py, calibration ``frameworks``).

Offloading: DeepSpeed offloads the optimizer at ZeRO 1-3 and parameters at ZeRO-3; FSDP (accelerate or torchtune)
offloads parameters, gradients and optimizer together; torchtune's full fine-tuning recipe shards, and so offloads,
only with more than one data-parallel rank. Checkpointing: torchtune has no per-operator selective level. A pinned
value is taken as given, except an offload the engine cannot run, which is refused with a one-line error.
"""

from __future__ import annotations

import dataclasses

import pytest

from optimizer.inputs.catalog import load_scenario, resolve_model
from optimizer.inputs.errors import InputError
from optimizer.inputs.schema import Checkpointing, Offload
from optimizer.models.configs import CHECKPOINTING, OFFLOAD, PRECISION
from optimizer.models.engines import OffloadRule, engine_key, offload_rule
from optimizer.solve.space import enumerate_all, make_job


def _rows(write_scenario, catalog, name="s.yaml", **changes):
    path = write_scenario(name, **changes)
    sc = load_scenario(path)
    _, _, _, ev = enumerate_all(sc, catalog, resolve_model(sc, catalog, path), str(path))
    assert len(ev)
    zo = {(int(z), OFFLOAD[int(o)]) for z, o in zip(ev.cfg.zero_stage, ev.cfg.offload, strict=True)}
    return ev, zo


def _training(framework, sharding=None, optimizer="adamw"):
    """The training block; sharding None leaves the field out (set, only a value the framework takes passes)."""
    set_ = {} if sharding is None else {"sharding": sharding}
    return {"framework": framework, **set_, "optimizer": optimizer, "attention": "flash"}


def test_deepspeed_offloads_the_optimizer_at_every_stage_and_parameters_at_stage_3(write_scenario, catalog):
    _, zo = _rows(write_scenario, catalog, training=_training("hf"))
    offloaded = {p for p in zo if p[1] is not Offload.none}
    assert offloaded == {(1, Offload.optimizer), (2, Offload.optimizer), (3, Offload.optimizer), (3, Offload.all)}


@pytest.mark.parametrize("framework,sharding", [("hf", "fsdp"), ("torchtune", "fsdp")])
def test_fsdp_offloads_everything_or_nothing(write_scenario, catalog, framework, sharding):
    _, zo = _rows(write_scenario, catalog, training=_training(framework, sharding))
    assert {p for p in zo if p[1] is not Offload.none} == {(3, Offload.all)}


def test_torchtune_full_fine_tuning_offloads_only_with_several_ranks(write_scenario, catalog):
    ev, _ = _rows(write_scenario, catalog, method="full", lora=None, training=_training("torchtune", "fsdp"))
    offloaded = ev.cfg.offload != OFFLOAD.index(Offload.none)
    assert offloaded.any()
    assert (ev.cfg.dp[offloaded] >= 2).all()
    assert ((ev.cfg.dp == 1) & ~offloaded).any()  # one card stays possible, without offload


def test_torchtune_lora_offloads_on_one_rank_too(write_scenario, catalog):
    ev, _ = _rows(write_scenario, catalog, training=_training("torchtune", "fsdp"))
    offloaded = ev.cfg.offload != OFFLOAD.index(Offload.none)
    assert (ev.cfg.dp[offloaded] == 1).any()


@pytest.mark.parametrize("training,plan,says", [
    (("hf", "deepspeed"), {"zero_stage": 0, "offload": "optimizer"}, "offload optimizer runs at ZeRO stage 1, 2 or 3"),
    (("hf", "deepspeed"), {"zero_stage": 2, "offload": "all"}, "offload all runs at ZeRO stage 3"),
    (("hf", "fsdp"), {"zero_stage": 2, "offload": "optimizer"}, "hf_fsdp does not run offload optimizer"),
    (("hf", "fsdp"), {"offload": "optimizer"}, "hf_fsdp does not run offload optimizer"),
    (("torchtune", "fsdp"), {"offload": "optimizer"}, "torchtune does not run offload optimizer"),
    (("nemo", None), {"zero_stage": 3, "offload": "optimizer"}, "nemo does not run offload optimizer at ZeRO-3"),
    (("hf", "deepspeed", "adamw_8bit"), {"offload": "optimizer"}, "hf_deepspeed cannot step adamw_8bit on the CPU"),
    (("hf", "fsdp", "paged_adamw_8bit"), {"offload": "all"}, "hf_fsdp cannot step paged_adamw_8bit on the CPU"),
])  # fmt: skip
def test_a_pinned_offload_the_engine_cannot_run_is_refused(write_scenario, catalog, training, plan, says):
    """Before, a pinned offload ran as given: ZeRO-0 with offload optimizer kept the states on the GPU in memory
    while time priced a CPU Adam step, and FSDP engines got an optimizer-only offload their launch files cannot
    write."""
    with pytest.raises(InputError) as err:
        _rows(write_scenario, catalog, training=_training(*training), plan=plan)
    assert err.value.field == "plan.offload"
    assert says in err.value.problem and "allowed: offload none" in err.value.problem


def test_deepspeed_steps_a_pinned_sgd_offload_on_the_cpu(write_scenario, catalog):
    """The solver offloads only AdamW under DeepSpeed; pinned, SGD runs as a client optimizer on the CPU partitions
    (the launch file's zero_force_ds_cpu_optimizer false)."""
    _, zo = _rows(write_scenario, catalog, training=_training("hf", "deepspeed", "sgd"))
    assert all(o is Offload.none for _, o in zo)
    _, zo = _rows(write_scenario, catalog, training=_training("hf", "deepspeed", "sgd"),
                  plan={"zero_stage": 2, "offload": "optimizer"})  # fmt: skip
    assert zo == {(2, Offload.optimizer)}


def test_a_pinned_offload_the_engine_runs_keeps_only_the_engines_pairs(write_scenario, catalog):
    _, zo = _rows(write_scenario, catalog, training=_training("hf", "deepspeed"), plan={"offload": "optimizer"})
    assert zo == {(1, Offload.optimizer), (2, Offload.optimizer), (3, Offload.optimizer)}
    _, zo = _rows(write_scenario, catalog, training=_training("hf", "fsdp"), plan={"offload": "all"})
    assert zo == {(3, Offload.all)}


def test_torchtune_is_not_offered_per_operator_selective_checkpointing(write_scenario, catalog):
    ev, _ = _rows(write_scenario, catalog, training=_training("torchtune", "fsdp"))
    assert CHECKPOINTING.index(Checkpointing.selective) not in set(ev.cfg.checkpointing.tolist())
    pinned, _ = _rows(write_scenario, catalog, "pin.yaml", training=_training("torchtune", "fsdp"),
                      plan={"checkpointing": "selective"})  # fmt: skip
    assert set(pinned.cfg.checkpointing.tolist()) == {CHECKPOINTING.index(Checkpointing.selective)}


def test_nemo_offloads_the_optimizer_under_the_distributed_optimizer_only(write_scenario, catalog):
    """Megatron-Core's HybridDeviceOptimizer runs under the distributed optimizer (ZeRO-1); no parameter offload."""
    _, zo = _rows(write_scenario, catalog, training=_training("nemo"))
    assert {p for p in zo if p[1] is not Offload.none} == {(1, Offload.optimizer)}


def test_engine_missing_from_offload_modes_keeps_every_pair(write_scenario, catalog):
    path = write_scenario(training=_training("nemo"))
    sc = load_scenario(path)
    job = make_job(sc, resolve_model(sc, catalog, path), catalog.calibration)
    assert engine_key(sc, job) == "nemo"
    frameworks = {**catalog.calibration["frameworks"], "offload_modes": {}}
    bare = dataclasses.replace(catalog, calibration={**catalog.calibration, "frameworks": frameworks})
    rule = offload_rule(sc, job, bare)
    assert rule.pairs is None and rule.min_dp == 1


@pytest.mark.parametrize(
    ("rule", "zero", "offload", "dp", "kept"),
    [
        (OffloadRule(), 2, Offload.optimizer, 1, True),
        (OffloadRule(allowed=False), 3, Offload.all, 8, False),
        (OffloadRule(allowed=False), 3, Offload.none, 8, True),
        (OffloadRule(pairs=frozenset({(3, "all")})), 3, Offload.optimizer, 8, False),
        (OffloadRule(pairs=frozenset({(3, "all")}), min_dp=2), 3, Offload.all, 1, False),
        (OffloadRule(pairs=frozenset({(3, "all")}), min_dp=2), 3, Offload.all, 2, True),
    ],
)
def test_offload_rule_keeps(rule, zero, offload, dp, kept):
    assert rule.keeps(zero, offload, dp) is kept


@pytest.mark.parametrize(("framework", "expected"), [("hf", "fp16"), ("torchtune", "fp32")])
def test_gpus_without_bf16_get_the_engines_fallback_precision(write_scenario, catalog, framework, expected):
    """torchtune's recipes refuse fp16 ("full fp16 training is not supported"): V100 plans run fp32 there.

    (fp16 for the bf16-published Llama-3.1-8B needs allow.fp16_for_bf16, docs/precision.md.)
    """
    ev, _ = _rows(write_scenario, catalog, training=_training(framework, "fsdp"), plan={"gpu": "V100-32G"},
                  allow={"fp16_for_bf16": True})
    assert {PRECISION[int(p)].value for p in ev.cfg.precision} == {expected}


def _refusal(write_scenario, catalog, **changes) -> str:
    path = write_scenario("refused.yaml", **changes)
    sc = load_scenario(path)
    with pytest.raises(InputError) as err:
        enumerate_all(sc, catalog, resolve_model(sc, catalog, path), str(path))
    return str(err.value)


def test_hf_plans_are_data_parallel_only_and_a_tp_pin_is_refused(write_scenario, catalog):
    """The HF Trainer under DeepSpeed or FSDP counts every card as a data-parallel rank."""
    ev, _ = _rows(write_scenario, catalog, model="Llama-3.1-70B", method="full", lora=None,
                  training=_training("hf"), plan={"gpu": "H100-SXM"})  # fmt: skip
    assert set(ev.cfg.tp.tolist()) == {1}
    nemo, _ = _rows(write_scenario, catalog, "nemo.yaml", model="Llama-3.1-70B", method="full", lora=None,
                    training=_training("nemo"), plan={"gpu": "H100-SXM"})  # fmt: skip
    assert max(nemo.cfg.tp.tolist()) > 1
    message = _refusal(write_scenario, catalog, training=_training("hf"), plan={"tp": 2})
    assert message.endswith("refused.yaml: plan.tp: hf_deepspeed runs tp 1, not 2")


def test_engines_refuse_methods_optimizers_and_techniques_they_lack(write_scenario, catalog):
    assert "method: nemo runs method full | lora, not qlora" in _refusal(
        write_scenario, catalog, method="qlora", training=_training("nemo"))
    assert "training.optimizer: nemo runs adamw, not sgd" in _refusal(
        write_scenario, catalog, training=_training("nemo", optimizer="sgd"))
    assert "training.optimizer_in_backward" in _refusal(
        write_scenario, catalog, training={**_training("hf"), "optimizer_in_backward": True})
    in_bwd = {**_training("torchtune", "fsdp"), "optimizer_in_backward": True}
    assert "plan.grad_accum" in _refusal(write_scenario, catalog, method="full", lora=None, training=in_bwd,
                                         plan={"grad_accum": 2})  # fmt: skip
    offload = {**_training("torchtune", "fsdp"), "activation_offload": True}
    assert "plan.checkpointing" in _refusal(write_scenario, catalog, training=offload, plan={"checkpointing": "none"})


def test_torchtune_optimizer_in_backward_plans_never_accumulate(write_scenario, catalog):
    training = {**_training("torchtune", "fsdp"), "optimizer_in_backward": True}
    ev, _ = _rows(write_scenario, catalog, method="full", lora=None, training=training)
    assert set(ev.cfg.grad_accum.tolist()) == {1}


def test_zero_0_with_offload_is_one_line_at_the_cli(write_scenario, run_cli):
    path = write_scenario(training=_training("hf"), plan={"zero_stage": 0, "offload": "optimizer"})
    done = run_cli("solve", path)
    assert done.exit_code == 2
    assert "plan.offload" in done.stderr and "zero_stage 1, 2 or 3" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("framework,sharding,refused", [
    ("nemo", "fsdp", True),  # once accepted silently: NeMo shards by the plan's ZeRO stage, never by this field
    ("nemo", "deepspeed", True),  # set, the default is refused too: it passed, and NeMo ignored it
    ("nemo", None, False),  # left out: the default stands for "not set" outside hf
    ("torchtune", "fsdp", False),  # what torchtune runs (scenarios/8b-full-torchtune.yaml states it)
    ("torchtune", "deepspeed", True),  # torchtune shards with FSDP2 whatever the field says
    ("torchtune", None, False),
    ("hf", "fsdp", False),
    ("hf", "deepspeed", False),
    ("hf", None, False),
])  # fmt: skip
def test_a_sharding_the_framework_does_not_run_is_a_one_line_error(run_cli, write_scenario, framework, sharding,
                                                                    refused):  # fmt: skip
    set_ = {} if sharding is None else {"sharding": sharding}
    path = write_scenario(f"{framework}-{sharding}.yaml", catalog="us",
                          training={"framework": framework, **set_, "attention": "sdpa"})  # fmt: skip
    res = run_cli("solve", path, "--json")
    if not refused:
        assert res.exit_code == 0, res.stderr
        return
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and res.stdout == "", res.stderr
    assert res.stderr.startswith(f"ftopt: error: {path}: training.sharding: {sharding} is read by framework hf only")
    allowed = "fsdp, or leave it out" if framework == "torchtune" else "leave it out"
    assert res.stderr.rstrip().endswith(f"allowed: {allowed}")


def test_fsdp_has_no_zero_1_and_a_pinned_one_is_a_one_line_error(write_scenario, catalog, run_cli):
    # FSDP shards gradients and optimizer states together (SHARD_GRAD_OP): a stage-1 plan was priced as one
    # all-reduce per step and launched as stage 2; DeepSpeed does have stage 1
    _, fsdp = _rows(write_scenario, catalog, training=_training("hf", "fsdp"))
    assert {z for z, _ in fsdp} == {0, 2, 3}
    _, deepspeed = _rows(write_scenario, catalog, "d.yaml", training=_training("hf"))
    assert 1 in {z for z, _ in deepspeed}
    done = run_cli("solve", write_scenario("p.yaml", training=_training("hf", "fsdp"), plan={"zero_stage": 1}))
    assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "plan.zero_stage" in done.stderr and "allowed: 0, 2, 3" in done.stderr


@pytest.mark.parametrize("framework,precision,refused", [
    ("hf", "fp8", False),  # llm-foundry and Axolotl train hf models in fp8 (the launch notes say how)
    ("hf", "fp16", False),
    ("torchtune", "fp16", True),  # the recipes raise for fp16; the plan had only carried a note saying so
    ("torchtune", "fp32", False),
    ("torchtune", "fp8", True),  # no fp8 dtype in the recipes
    ("nemo", "fp8", False),  # Transformer Engine fp8
])  # fmt: skip
def test_a_pinned_precision_the_launch_files_cannot_train_in_is_refused(write_scenario, run_cli, framework, precision,
                                                                         refused):  # fmt: skip
    training = {"framework": framework, "optimizer": "adamw"}
    path = write_scenario(training=training, plan={"precision": precision, "gpu": "H100-SXM"})
    done = run_cli("solve", path)
    if refused:
        assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1
        assert "plan.precision" in done.stderr and f"not {precision}" in done.stderr
    else:
        assert done.exit_code in (0, 1), done.stderr


@pytest.mark.parametrize("changes,field,says", [
    # Liger reads lm_head.weight, PEFT's LoRA layer returns its base weight there: the adapter would never train
    ({"lora": {"rank": 16, "alpha": 32, "targets": ["all-linear", "lm_head"]}}, "lora.targets", "lm_head with"),
    # starcoder2 is not among the model types Liger patches: the full logits would come back
    ({"model": {"name": "sc2-7b", "layers": 32, "hidden": 4608, "intermediate": 18432, "heads": 36, "kv_heads": 4,
                "vocab": 49152, "model_type": "starcoder2"}}, "training.loss", "model_type starcoder2"),
    ({"model": {"name": "no-type", "layers": 32, "hidden": 4096, "intermediate": 14336, "heads": 32, "kv_heads": 8,
                "vocab": 32000}}, "training.loss", "no model_type (set model.model_type)"),
])  # fmt: skip
def test_the_fused_loss_is_refused_where_liger_cannot_run_it_as_priced(write_scenario, run_cli, changes, field, says):
    training = {"framework": "hf", "optimizer": "adamw", "loss": "fused"}
    done = run_cli("solve", write_scenario(training=training, **changes))
    assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1
    assert f"{field}: " in done.stderr and says in done.stderr


def test_the_fused_loss_runs_on_a_llama_with_attention_targets(write_scenario, run_cli):
    training = {"framework": "hf", "optimizer": "adamw", "loss": "fused"}
    done = run_cli("solve", write_scenario(training=training, model="Llama-3.1-8B"))
    assert done.exit_code in (0, 1), done.stderr
