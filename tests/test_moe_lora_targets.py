"""LoRA targets of mixture-of-experts models: the launch files adapt the experts the plan prices.

Before, Mixtral-8x7B LoRA was priced with adapters on all 8 experts' MLPs (240M trainable) while launch.yaml,
llamafactory.yaml and axolotl.yaml wrote ``target_modules: [..., gate_proj, up_proj, down_proj]``, names no Mixtral
module has: PEFT adapted the attention only (13.6M). In transformers 5 (every HF-format export's checked version)
the experts are the 3-D parameters ``mlp.experts.gate_up_proj`` / ``mlp.experts.down_proj``, which PEFT adapts
through ``target_parameters`` (catalogs/lora_targets.yaml); tests_real/test_moe_lora.py applies the exported
LoraConfig with transformers 5.24 + peft 0.21.2 and counts the adapters.
"""

from __future__ import annotations

import json

import pytest
import yaml

from optimizer.inputs.catalog import _MOE_TYPES
from optimizer.inputs.schema import Scenario
from optimizer.inputs.schema_plan import Plan
from optimizer.launch.by_engine import launch_settings
from optimizer.launch.lora_names import ATTENTION, MLP, family, lora_names, peft_matches, table
from optimizer.models import memory
from tests.memory_builders import job

from .test_hf_config import QWEN3_30B_A3B, QWEN15_MOE, _import

S11 = {  # the reviewer's scenario (budget and deadline as given), pinned to the plan it solves to: one card
    "name": "s11", "model": "Mixtral-8x7B", "method": "lora", "data": {"tokens": 1.0e8, "epochs": 1},
    "seq_len": 4096, "global_batch": 64, "training": {"framework": "hf", "sharding": "fsdp"},
    "budget": {"amount": 2000, "currency": "USD"}, "deadline_hours": 48, "catalog": "lambda",
    "plan": {"cards": 1, "zero_stage": 0},
}  # fmt: skip
EXPERTS = ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]
# the parameters of one Mixtral decoder block in transformers 5.24.0 (MixtralForCausalLM(config).named_parameters())
MIXTRAL_BLOCK = ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                 "self_attn.o_proj.weight", "mlp.gate.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj",
                 "input_layernorm.weight", "post_attention_layernorm.weight"]  # fmt: skip


def _solve(run_cli, write_scenario, tmp_path, doc):
    out = tmp_path / "launch"
    result = run_cli("solve", write_scenario("s.yaml", doc=doc), "--launch-dir", out, "--json")
    assert result.exit_code == 0, result.output
    files = {p.name: yaml.safe_load(p.read_text()) for p in out.iterdir()}
    return json.loads(result.stdout), files


def _written_targets(files):
    """(target modules, target parameters) of launch.yaml's LoraConfig, axolotl.yaml and llamafactory.yaml."""
    lora, ax, lf = files["launch.yaml"]["lora_config"], files["axolotl.yaml"], files["llamafactory.yaml"]
    return {
        "hf": (lora["target_modules"], lora.get("target_parameters", [])),
        "axolotl": (ax.get("lora_target_modules", []), ax.get("lora_target_parameters", [])),
        "llamafactory": (lf["lora_target"].split(","), []),
    }


def test_mixtral_lora_files_name_the_experts_as_transformers_5_has_them(run_cli, write_scenario, tmp_path):
    _, files = _solve(run_cli, write_scenario, tmp_path, S11)
    written = _written_targets(files)
    assert written["hf"] == written["axolotl"] == (list(ATTENTION), EXPERTS)
    assert written["llamafactory"] == (list(ATTENTION), [])  # lora_target has no way to name parameters
    names = {n for modules, params in written.values() for n in [*modules, *params]}
    assert not names & {"gate_proj", "up_proj", "down_proj", "w1", "w2", "w3", "gate"}
    notes = " ".join(files["launch.yaml"]["notes"])
    assert "llamafactory.yaml" in notes and "no expert" in notes


def test_dense_llama_keeps_its_module_names(run_cli, write_scenario, tmp_path):
    doc = {**S11, "model": "Llama-3.1-8B", "catalog": "us", "plan": {"cards": 1}}
    _, files = _solve(run_cli, write_scenario, tmp_path, doc)
    written = _written_targets(files)
    assert written["hf"] == written["axolotl"] == written["llamafactory"] == ([*ATTENTION, *MLP], [])
    assert "target_parameters" not in files["launch.yaml"]["lora_config"]
    every = Scenario.model_validate({**S11, "model": "Llama-3.1-8B", "lora": {"targets": ["all-linear"]}})
    assert lora_names(every, _catalog_arch("Llama-3.1-8B")).modules == "all-linear"


def _catalog_arch(name):
    from optimizer.inputs.catalog import load_catalog

    return load_catalog().model(name)


def _weight_shapes(arch):
    """(in, out) of each weight a written name adapts, and how many of it the model has (Mixtral, transformers 5)."""
    h, d, e, inter, layers = arch.hidden, arch.hidden // arch.heads, arch.experts, arch.intermediate, arch.layers
    return {
        "q_proj": ((h, arch.heads * d), layers), "k_proj": ((h, arch.kv_heads * d), layers),
        "v_proj": ((h, arch.kv_heads * d), layers), "o_proj": ((arch.heads * d, h), layers),
        "mlp.experts.gate_up_proj": ((h, 2 * inter), layers * e),  # experts x 2I x h: gate and up fused
        "mlp.experts.down_proj": ((inter, h), layers * e),
    }  # fmt: skip


def test_mixtral_trainable_count_is_the_adapters_on_the_weights_the_files_name(run_cli, write_scenario, tmp_path):
    """By hand from catalogs/models.yaml: r (in + out) per adapted weight, per expert for the experts' weights."""
    arch = _catalog_arch("Mixtral-8x7B")
    assert (arch.layers, arch.hidden, arch.intermediate, arch.heads, arch.kv_heads, arch.experts) == (
        32, 4096, 14336, 32, 8, 8)  # fmt: skip
    plan, files = _solve(run_cli, write_scenario, tmp_path, S11)
    lora = files["launch.yaml"]["lora_config"]
    shapes = _weight_shapes(arch)
    by_hand = sum(lora["r"] * (i + o) * n for name in lora["target_modules"] + lora["target_parameters"]
                  for (i, o), n in [shapes[name]])  # fmt: skip
    attention = 32 * 16 * ((4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096))
    experts = 32 * 8 * 16 * ((4096 + 2 * 14336) + (14336 + 4096))
    assert by_hand == attention + experts == 223_346_688
    sc = Scenario.model_validate(S11)
    assert memory.lora_params(job(arch, "lora", rank=16, targets=[str(t) for t in sc.lora_spec.targets])) == by_hand
    # one card, no sharding: the plan's gradients are the adapters' fp32 gradients (PEFT keeps adapters in fp32)
    assert (plan["plan"]["cards"], plan["plan"]["tp"]) == (1, 1)
    assert plan["memory"]["gradients"] == 4 * by_hand


def test_a_routed_experts_gate_and_up_are_one_adapter():
    """Either projection adapts the fused gate_up_proj whole: the same count, and a note saying so."""
    arch = _catalog_arch("Mixtral-8x7B")
    gate = memory.lora_params(job(arch, "lora", rank=8, targets=["gate_proj"]))
    assert gate == memory.lora_params(job(arch, "lora", rank=8, targets=["gate_proj", "up_proj"]))
    assert gate == 8 * 32 * 8 * (4096 + 2 * 14336)
    sc = Scenario.model_validate({**S11, "lora": {"targets": ["q_proj", "gate_proj"]}})
    names = lora_names(sc, arch)
    assert (names.modules, names.parameters) == (["q_proj"], ["mlp.experts.gate_up_proj"])
    assert any("adapting one adapts both" in n for n in names.notes)


def test_a_4_bit_base_keeps_the_routed_experts_in_16_bits():
    """bitsandbytes quantises Linears; transformers 5's fused experts are not, so they stay out of the NF4 count.

    Mixtral-8x7B by hand: attention 32 x (2 x 4096 x 4096 + 2 x 4096 x 1024) = 1,342,177,280 quantised, the
    32 x 8 experts' 3 x 4096 x 14336 = 45,097,156,608 not; a dense Llama's every block Linear is quantised.
    """
    arch = _catalog_arch("Mixtral-8x7B")
    qlora = job(arch, "qlora", rank=16)
    assert memory.quantized_params(qlora) == 1_342_177_280
    assert memory.linear_params(qlora) - memory.quantized_params(qlora) == 45_097_156_608
    llama = job(_catalog_arch("Llama-3.1-8B"), "qlora", rank=16)
    assert memory.quantized_params(llama) == memory.linear_params(llama)


def test_dense_mlp_counts_are_unchanged():
    """formulas.md section 5: Llama-3.1-8B r16 all-linear = 41,943,040 (PEFT's count)."""
    arch = _catalog_arch("Llama-3.1-8B")
    assert memory.lora_params(job(arch, "lora", rank=16, targets=["all-linear"])) == 41_943_040


def test_no_written_name_can_reach_the_router():
    """PEFT matches a target by full name or "."-suffix: the experts' names never match the router; "gate" would."""
    keys = [f"model.layers.0.{p}" for p in MIXTRAL_BLOCK] + ["model.layers.0.mlp.gate"]
    router = [k for k in keys if ".mlp.gate" in k]
    assert peft_matches("model.layers.0.mlp.gate", "gate")  # why ftopt never writes "gate"
    for fam in table().families.values():
        assert fam.router == "mlp.gate"
        for name in [*fam.experts.values(), *ATTENTION, *MLP]:
            assert not any(peft_matches(k, name) for k in router), name
        for name in set(fam.experts.values()):
            assert [k for k in keys if peft_matches(k, name)] == [f"model.layers.0.{name}"]


def test_every_moe_family_ftopt_imports_has_its_names():
    assert set(table().families) == set(_MOE_TYPES)
    assert family(_catalog_arch("Mixtral-8x7B")) is table().families["mixtral"]
    assert family(_catalog_arch("Llama-3.1-8B")) is None


def _names(tmp_path, config, targets=("all-linear",)):
    arch = _import(tmp_path, config)
    sc = Scenario.model_validate({**S11, "lora": {"targets": list(targets)}})
    return lora_names(sc, arch)


def test_qwen2_moe_keeps_the_shared_experts_module_names(tmp_path):
    """Qwen2-MoE's shared expert is a Linear MLP (gate_proj, up_proj, down_proj); its routed experts are parameters."""
    names = _names(tmp_path, QWEN15_MOE)
    assert (names.modules, names.parameters, names.notes) == ([*ATTENTION, *MLP], EXPERTS, ())


def test_qwen3_moe_names_only_attention_modules(tmp_path):
    names = _names(tmp_path, QWEN3_30B_A3B)
    assert (names.modules, names.parameters, names.notes) == (list(ATTENTION), EXPERTS, ())


def test_qwen3_moe_with_dense_blocks_says_peft_renames_their_mlps(tmp_path):
    """PEFT >= 0.20 moves qwen3_moe's gate_proj/up_proj/down_proj target modules onto the experts (measured)."""
    names = _names(tmp_path, {**QWEN3_30B_A3B, "mlp_only_layers": [0]})
    assert names.modules == [*ATTENTION, *MLP] and names.parameters == EXPERTS
    assert any("twice the rank" in n for n in names.notes)


@pytest.mark.parametrize("framework", ["nemo", "torchtune"])
def test_the_other_engines_write_no_hf_module_names_for_mixtral(framework, catalog):
    """NeMo's linear_fc1/linear_fc2 are Megatron's expert Linears too (router: mlp.router, never named); torchtune
    0.6.1 has no Mixtral builder and says so."""
    sc = Scenario.model_validate({**S11, "training": {"framework": framework}})
    settings = launch_settings(sc, _eight_h100s(), 8, arch=catalog.model("Mixtral-8x7B"))
    if framework == "nemo":
        assert settings["nemo"]["peft"]["target_modules"] == ["linear_fc1", "linear_fc2", "linear_proj", "linear_qkv"]
    else:
        assert "no known builder" in " ".join(settings["notes"])


def _eight_h100s() -> Plan:
    return Plan(gpu="H100-SXM", offer="x", cards=8, nodes=1, tp=1, pp=1, dp=8, zero_stage=1, offload="none",
                micro_batch=1, grad_accum=8, precision="bf16", optimizer="adamw", checkpointing="full", term="hour",
                billed_units={"hour": 10})  # fmt: skip


def test_expert_adapters_with_dropout_are_a_one_line_error(run_cli, write_scenario):
    """PEFT's lora.ParamWrapper (target_parameters) raises for lora_dropout != 0 (peft 0.18.1-0.21.2, measured):
    the hf launch files could not start, so the scenario is refused; attention-only targets keep their dropout."""
    doc = {**S11, "lora": {"dropout": 0.05}}
    result = run_cli("solve", write_scenario("drop.yaml", doc=doc))
    assert result.exit_code == 2
    assert "lora.dropout" in result.stderr and "allowed: 0" in result.stderr and "\n" not in result.stderr.strip()
    attention = {**S11, "lora": {"dropout": 0.05, "targets": list(ATTENTION)}}
    assert run_cli("solve", write_scenario("attn.yaml", doc=attention)).exit_code == 0
    nemo = {**S11, "lora": {"dropout": 0.05}, "training": {"framework": "nemo"}, "plan": {}}
    assert "lora.dropout" not in run_cli("solve", write_scenario("nemo.yaml", doc=nemo)).stderr


def test_the_probe_adapts_the_experts_too(write_scenario, tmp_path):
    """``ftopt probe`` builds the planned Mixtral and applies LoRA with these names (probe.py reads peft_targets)."""
    from optimizer.measure.probe import probe_scenario

    out = tmp_path / "probe"
    probe_scenario(write_scenario("s11.yaml", doc=S11), out)
    lora = json.loads((out / "probe_config.json").read_text())["lora"]
    assert lora["peft_targets"] == {"target_modules": list(ATTENTION), "target_parameters": EXPERTS}


def test_an_moe_plan_says_its_speed_is_unmeasured_and_a_4_bit_base_keeps_its_experts(run_cli, write_scenario, tmp_path):
    # the reviewer's Mixtral QLoRA printed nf4 everywhere with no word that 97% of the model stays 16-bit, and an MoE
    # plan's time had no word that no MoE run is among the reference cases
    qlora, _ = _solve(run_cli, write_scenario, tmp_path, {**S11, "method": "qlora", "plan": {}})
    notes = " ".join(qlora["notes"])
    assert "no published run of an MoE model" in notes
    assert "routed experts (45.1 B parameters, 97% of the model)" in notes  # 45,097,156,608 of 46.7 B
    lora = " ".join(_solve(run_cli, write_scenario, tmp_path, {**S11, "plan": {}})[0]["notes"])
    assert "no published run of an MoE model" in lora and "routed experts" not in lora
    dense = " ".join(_solve(run_cli, write_scenario, tmp_path, {**S11, "model": "Llama-3.1-8B", "method": "qlora",
                                                                "plan": {}})[0]["notes"])  # fmt: skip
    assert "MoE" not in dense
