"""A model given as a local HF config.json imports to the same architecture as the catalog entry."""

from __future__ import annotations

import json

import pytest

from optimizer.inputs.catalog import import_hf_config
from optimizer.inputs.errors import InputError
from optimizer.inputs.inputfile import MAX_JSON_BYTES
from optimizer.solve.planner import estimate_scenario

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


# Values of Qwen/Qwen3-30B-A3B's config.json (keys as transformers' Qwen3MoeConfig names them)
QWEN3_30B_A3B = {
    "model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48,
    "num_experts": 128, "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "vocab_size": 151936, "tie_word_embeddings": False,
}  # fmt: skip
# Values of Qwen/Qwen1.5-MoE-A2.7B's config.json (Qwen2MoeConfig): 60 routed experts and one shared expert
QWEN15_MOE = {
    "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_attention_heads": 16, "num_key_value_heads": 16,
    "num_hidden_layers": 24, "num_experts": 60, "num_experts_per_tok": 4, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "vocab_size": 151936, "tie_word_embeddings": False,
}  # fmt: skip


def _near(count: int, published: float) -> bool:
    """Within the rounding of a count published to one decimal in billions (either direction)."""
    return abs(count - published) < 0.06e9


def _import(tmp_path, cfg: dict):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return import_hf_config(path)


def test_qwen3_moe_config_gives_the_published_totals(tmp_path):
    """Model card (huggingface.co/Qwen/Qwen3-30B-A3B): 30.5B parameters in total, 3.3B activated."""
    arch = _import(tmp_path, QWEN3_30B_A3B)
    assert (arch.experts, arch.experts_per_token, arch.expert_width, arch.dense_layers) == (128, 8, 768, 0)
    attn = 2 * 2048 * 4096 + 2 * 2048 * 512 + 2 * 2048  # q, o, k, v, two norms
    experts = 128 * 3 * 2048 * 768 + 2048 * 128  # 128 SwiGLU experts of width 768 and the router
    assert arch.total_params == 48 * (attn + experts) + 2 * 151936 * 2048 + 2048
    assert _near(arch.total_params, 30.5e9) and _near(arch.active_params, 3.3e9)


def test_qwen2_moe_config_counts_the_shared_expert(tmp_path):
    """Model card (huggingface.co/Qwen/Qwen1.5-MoE-A2.7B): 14.3B parameters in total, 2.7B activated."""
    arch = _import(tmp_path, QWEN15_MOE)
    assert (arch.shared_experts, arch.shared_intermediate, arch.expert_width) == (1, 5632, 1408)
    assert _near(arch.total_params, 14.3e9) and _near(arch.active_params, 2.7e9)
    assert arch.active_width == 4 * 1408 + 5632  # a token passes 4 routed experts and the shared one


def test_moe_memory_and_time_use_the_expert_widths(tmp_path):
    """Per token, an MoE block's activations and FLOPs are those of a dense block as wide as the experts a token
    passes (4 x 1408 + 5632 = 11264, not 4 x intermediate_size); LoRA adapts every expert at its own width, a routed
    expert's gate and up as the one fused weight transformers 5 has (gate_up_proj, 2048 -> 2 x 1408)."""
    from optimizer.models import activations, memory, timing
    from tests.memory_builders import cfg, consts, job

    arch = _import(tmp_path, QWEN15_MOE)
    dense = arch.model_copy(update={"experts": 1, "experts_per_token": 1, "intermediate": 11264,
                                    "expert_intermediate": None, "shared_experts": 0, "shared_intermediate": None})
    c = cfg()
    for method in ("full", "lora"):
        moe_bytes = activations.activation_bytes_per_token_layer(job(arch, method), c, consts())
        dense_bytes = activations.activation_bytes_per_token_layer(job(dense, method), c, consts())
        assert float(moe_bytes[0]) == float(dense_bytes[0])
    # GEMM FLOPs per token, full fine-tuning without recomputation: 6N, N the parameters a token passes through
    # (active: 4 of 60 routed experts) less the input embedding, whose lookup is no GEMM
    assert timing.flops_per_token_parts(job(arch), c)[0][0] == 6.0 * (arch.active_params - 151936 * 2048)
    routed = 60 * ((2048 + 2 * 1408) + (1408 + 2048))  # each routed expert: fused gate_up, and down
    mlp = 24 * (routed + 3 * (2048 + 5632))  # and gate, up, down of the shared expert
    attn = 24 * 4 * (2048 + 2048)
    assert memory.lora_params(job(arch, "lora", rank=8, targets=["all-linear"])) == 8 * (attn + mlp)
    assert memory.largest_module_params(job(arch)) == 151936 * 2048  # the embedding, wider than any expert


def test_moe_config_errors_name_the_config_key(tmp_path):
    too_many = {**QWEN3_30B_A3B, "num_experts_per_tok": 256}
    with pytest.raises(InputError) as err:
        _import(tmp_path, too_many)
    assert err.value.field == "num_experts_per_tok" and "num_experts (128)" in err.value.problem
    deepseek = {**QWEN3_30B_A3B, "model_type": "deepseek_v3", "n_routed_experts": 256, "kv_lora_rank": 512}
    with pytest.raises(InputError) as err:
        _import(tmp_path, deepseek)
    assert err.value.field == "kv_lora_rank" and "latent attention" in err.value.problem


def test_dense_blocks_of_moe_configs_are_counted(tmp_path):
    """DeepSeek's first_k_dense_replace and Qwen's mlp_only_layers / decoder_sparse_step make some blocks dense."""
    qwen = _import(tmp_path, {**QWEN15_MOE, "mlp_only_layers": [0, 1], "decoder_sparse_step": 2})
    assert qwen.dense_layers == 24 - len([i for i in range(2, 24) if (i + 1) % 2 == 0])
    deepseek_moe = {k: v for k, v in QWEN15_MOE.items() if k not in ("num_experts", "shared_expert_intermediate_size")}
    deepseek_moe.update(model_type="deepseek", n_routed_experts=64, n_shared_experts=2, first_k_dense_replace=1)
    arch = _import(tmp_path, deepseek_moe)
    assert (arch.experts, arch.shared_experts, arch.dense_layers, arch.moe_layers) == (64, 2, 1, 23)
    assert arch.mlp_widths == ((1, 5632), (23 * 64, 1408), (23 * 2, 1408))


@pytest.mark.parametrize("key", ["dtype", "torch_dtype"])
def test_the_published_dtype_is_read_under_either_name(tmp_path, key):
    """transformers >= 4.56 writes config.json "dtype"; reading only "torch_dtype" let a bf16 model be planned in
    fp16 on a V100 with no warning."""
    assert _import(tmp_path, {**QWEN25_7B, key: "bfloat16"}).torch_dtype == "bfloat16"


def test_an_moe_config_without_its_expert_count_is_refused(tmp_path):
    """model_type mixtral without num_local_experts was read as a dense 7.2B model (Mixtral-8x7B holds 46.7B)."""
    cfg = {k: v for k, v in MIXTRAL.items() if k != "num_local_experts"}
    with pytest.raises(InputError) as err:
        _import(tmp_path, cfg)
    assert err.value.field == "num_local_experts"


# Gemma-2-9B's published config.json (google/gemma-2-9b): no tie_word_embeddings key; Gemma2Config defaults it to True
GEMMA2_9B = {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
             "torch_dtype": "float32"}  # fmt: skip


def test_a_config_without_tie_word_embeddings_takes_its_class_default(tmp_path):
    # Gemma-2-9B read as untied counted 10.16 B parameters (a second 0.92 B output matrix); tied it is 9.24 B, the
    # published size. A Llama config without the key stays untied (LlamaConfig's default)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA2_9B))
    gemma = import_hf_config(path)
    assert gemma.tied_embeddings and round(gemma.total_params / 1e9, 2) == 9.24
    path.write_text(json.dumps({**GEMMA2_9B, "tie_word_embeddings": False}))
    assert not import_hf_config(path).tied_embeddings
    path.write_text(json.dumps({**GEMMA2_9B, "model_type": "llama"}))
    assert not import_hf_config(path).tied_embeddings


def test_hf_config_with_other_model_keys_says_so(run_cli, write_scenario):
    # it said "model.layers: unknown key, did you mean 'layers'?" (suggesting the key it refused)
    done = run_cli("solve", write_scenario(model={"hf_config": "c.json", "layers": 2}))
    assert done.exit_code == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "model: hf_config takes no other keys (config.json gives the architecture): remove layers" in done.stderr


def test_a_config_json_is_read_up_to_the_json_limit_the_readme_states(tmp_path):
    """README "Input limits": 16 MiB for a JSON file, HF config.json included (the reader stopped at 4 MiB)."""
    path = tmp_path / "config.json"
    text = json.dumps(QWEN25_7B)
    path.write_text(text + " " * (MAX_JSON_BYTES - len(text)))  # padding, as a pretty-printed file has
    assert import_hf_config(path).hidden == 3584
    path.write_text(text + " " * (MAX_JSON_BYTES + 1 - len(text)))
    with pytest.raises(InputError, match="larger than the 16,777,216-byte limit"):
        import_hf_config(path)
