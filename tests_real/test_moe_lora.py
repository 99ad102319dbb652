"""MoE LoRA: the LoraConfig ftopt writes, applied by PEFT to the real model class, adapts what the plan priced.

Each model is built from its config.json values on the meta device (no weights, no memory), the exported
``lora_config`` is handed to ``peft.get_peft_model``, and the adapter parameters PEFT creates are counted against
the memory model's ``lora_params``. Before, Mixtral's export named gate_proj/up_proj/down_proj, which no Mixtral
module has: PEFT adapted 13.6M attention parameters where the plan priced 240M.

Versions: .ci/probe-requirements.txt (transformers 5.24.0, peft 0.21.2; run in the probe's environment, since the
launch one's torchao 0.14.1, kept for torchtune, makes PEFT 0.21 refuse every LoRA layer).
"""

from __future__ import annotations

import json

import pytest
import yaml

from optimizer.inputs.catalog import load_catalog, resolve_model
from optimizer.inputs.schema import Scenario
from optimizer.models.memory import lora_params
from optimizer.solve.planner import solve_scenario
from optimizer.solve.space import make_job

MIXTRAL_8X7B = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
                "num_experts_per_tok": 2, "tie_word_embeddings": False}  # fmt: skip
# Qwen/Qwen1.5-MoE-A2.7B and Qwen/Qwen3-30B-A3B config.json values (as tests/test_hf_config.py)
QWEN15_MOE = {"model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "moe_intermediate_size": 1408,
              "shared_expert_intermediate_size": 5632, "num_attention_heads": 16, "num_key_value_heads": 16,
              "num_hidden_layers": 24, "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
              "mlp_only_layers": [], "vocab_size": 151936, "tie_word_embeddings": False}  # fmt: skip
QWEN3_30B_A3B = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                 "moe_intermediate_size": 768, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                 "num_hidden_layers": 48, "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1,
                 "mlp_only_layers": [], "vocab_size": 151936, "tie_word_embeddings": False}  # fmt: skip
CASES = {"mixtral-catalog": ("Mixtral-8x7B", MIXTRAL_8X7B), "mixtral-config": (None, MIXTRAL_8X7B),
         "qwen2-moe": (None, QWEN15_MOE), "qwen3-moe": (None, QWEN3_30B_A3B)}  # fmt: skip
TARGETS = {"default": None, "all-linear": ["all-linear"], "attention-and-down": ["q_proj", "v_proj", "down_proj"]}


def _scenario(tmp_path, model, config, targets):
    if model is None:
        (tmp_path / "config.json").write_text(json.dumps(config))
        model = {"hf_config": "config.json"}
    doc = {"name": "moe", "model": model, "method": "lora", "data": {"tokens": 1.0e8, "epochs": 1}, "seq_len": 4096,
           "global_batch": 64, "training": {"framework": "hf", "sharding": "fsdp"}, "catalog": "us",
           "allow": {"gpus": ["H100-SXM"]}}  # fmt: skip
    if targets is not None:
        doc["lora"] = {"rank": 16, "alpha": 32, "targets": targets}
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _peft_adapters(config: dict, lora_config: dict) -> tuple[int, list[str]]:
    """Adapter parameters PEFT creates for ``lora_config`` on the model of ``config``, and their names."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = get_peft_model(AutoModelForCausalLM.from_config(cfg), LoraConfig(**lora_config))
    trained = [(n, p.numel()) for n, p in model.named_parameters() if p.requires_grad]
    return sum(n for _, n in trained), [n for n, _ in trained]


@pytest.mark.parametrize("targets", sorted(TARGETS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_peft_adapts_the_parameters_the_plan_priced(case, targets, tmp_path):
    model, config = CASES[case]
    path = _scenario(tmp_path, model, config, TARGETS[targets])
    result = solve_scenario(path)
    lora_config = result.launch["lora_config"]
    count, names = _peft_adapters(config, lora_config)
    sc = Scenario.model_validate(yaml.safe_load(path.read_text()))
    catalog = load_catalog()
    job = make_job(sc, resolve_model(sc, catalog, path), catalog.calibration)
    assert count == lora_params(job)
    assert not [n for n in names if ".mlp.gate." in n or "shared_expert_gate" in n]  # no router adapter
    if TARGETS[targets] is None or targets == "all-linear" or "down_proj" in TARGETS[targets]:
        assert any(".experts." in n for n in names)  # the routed experts have adapters
