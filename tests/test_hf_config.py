"""A model given as a local HF config.json imports to the same architecture as the catalog entry."""

from __future__ import annotations

import json

from optimizer.catalog import import_hf_config
from optimizer.planner import estimate_scenario

# Values of Qwen/Qwen2.5-7B's config.json (the source named in catalogs/models.yaml)
QWEN25_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
}
# Values of mistralai/Mixtral-8x7B-v0.1's config.json
MIXTRAL = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "tie_word_embeddings": False,
}


def test_qwen_config_gives_the_catalog_parameter_count(tmp_path, catalog):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN25_7B))
    arch = import_hf_config(path)
    assert arch.qkv_bias and arch.kv_heads == 4
    assert arch.total_params == catalog.model("Qwen2.5-7B").params


def test_mixtral_config_counts_every_expert(tmp_path, catalog):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MIXTRAL))
    arch = import_hf_config(path)
    assert arch.total_params == catalog.model("Mixtral-8x7B").params
    assert arch.active_params < arch.total_params / 3


def test_scenario_with_hf_config_beside_it_estimates(write_scenario, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN25_7B))
    path = write_scenario(model={"hf_config": "config.json"}, plan={"gpu": "A100-80G", "cards": 1, "micro_batch": 1})
    est = estimate_scenario(path, {})
    assert est.memory.weights > 2 * 7.6e9 * 0.99  # frozen bf16 base of 7.6B params
