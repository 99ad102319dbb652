"""Model and data input: variants read as their base, head_dim and model_type from config.json, parameter checks,
the model as read in the JSON answer, and packing versus padding."""

from __future__ import annotations

import json

import pytest

from optimizer.inputs.catalog import import_hf_config, resolve_model
from optimizer.inputs.errors import InputError
from optimizer.inputs.schema import Scenario
from optimizer.solve.planner import solve_scenario

from .conftest import scenario_doc

# google/gemma-2-9b config.json (hidden 3584 = 16 heads x 224, but head_dim is 256)
GEMMA2_9B = {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336, "num_attention_heads": 16,
             "num_hidden_layers": 42, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
             "tie_word_embeddings": True}  # fmt: skip
# Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size" (arXiv 2408.00118), Table 2:
# non-embedding parameters of the 9B model. Gemma-2 has four RMSNorms per block where ModelArch counts two
# (2 x 3584 x 42 = 301,056 fewer), so 0.01% is the tolerance.
GEMMA2_9B_NON_EMBEDDING = 8_324_201_984


def test_gemma2_head_dim_is_read_from_the_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA2_9B))
    arch = import_hf_config(path)
    assert arch.head_dim == 256 and arch.model_type == "gemma2"
    non_embedding = arch.total_params - arch.embedding_params
    assert non_embedding == pytest.approx(GEMMA2_9B_NON_EMBEDDING, rel=1e-4)


def test_an_unfamiliar_model_type_is_noted(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GEMMA2_9B, "model_type": "falcon"}))
    assert any("model_type 'falcon'" in n for n in import_hf_config(path).import_notes)


def test_a_config_that_disagrees_with_the_published_count_is_warned(tmp_path, catalog):
    cfg = {
        "model_type": "qwen2",
        "hidden_size": 3584,
        "intermediate_size": 9472,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "_name_or_path": "Qwen/Qwen2.5-7B",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    sc = Scenario.model_validate(scenario_doc(model={"hf_config": str(tmp_path / "config.json")}))
    notes = resolve_model(sc, catalog).import_notes
    assert any("parameters but catalog Qwen2.5-7B says 7.616 B" in n for n in notes), notes
    cfg["intermediate_size"] = 18944
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert not resolve_model(sc, catalog).import_notes


@pytest.mark.parametrize("name", ["Qwen2.5-7B-Instruct", "qwen2.5-7b-instruct", "Qwen/Qwen2.5-7B-Instruct"])
def test_an_instruct_variant_is_read_as_its_base_with_a_note(catalog, name):
    arch = resolve_model(Scenario.model_validate(scenario_doc(model=name)), catalog)
    assert arch.name == "Qwen2.5-7B"
    assert any(f"'{name}' read as 'Qwen2.5-7B'" in n for n in arch.import_notes)


def test_an_unknown_model_still_fails_and_says_variants_are_accepted(catalog):
    with pytest.raises(InputError, match=r"unknown model 'Qwen9-7B-Instruct'.*is read as its base"):
        resolve_model(Scenario.model_validate(scenario_doc(model="Qwen9-7B-Instruct")), catalog)


def test_solve_and_estimate_json_carry_the_model_as_read(run_cli, write_scenario):
    path = write_scenario(model="Qwen2.5-7B-Instruct", allow={"gpus": ["A100-80G"]})
    doc = json.loads(run_cli("solve", path, "--json").stdout)
    assert doc["model"] == {"name": "Qwen2.5-7B", "params": 7615616512, "layers": 28, "hidden": 3584,
                            "intermediate": 18944, "heads": 28, "kv_heads": 4, "head_dim": 128, "vocab": 152064,
                            "tied_embeddings": False}  # fmt: skip
    assert any("read as 'Qwen2.5-7B'" in n for n in doc["notes"])
    est = json.loads(run_cli("estimate", path, "--gpu", "A100-80G", "--cards", "1", "--micro-batch", "1",
                             "--json").stdout)  # fmt: skip
    assert est["model"] == doc["model"]


# ------------------------------------------------------------------------------------------------ data rows


def _hours(write_scenario, name, micro_batch=1, **data):
    path = write_scenario(name, data=data, allow={"gpus": ["A100-80G"]}, plan={"cards": 1, "micro_batch": micro_batch})
    result = solve_scenario(path)
    return result.best, result


def test_padding_costs_time_in_proportion_to_the_padding(write_scenario):
    packed, _ = _hours(write_scenario, "p.yaml", micro_batch=2, samples=20000, avg_tokens=512)
    padded, res = _hours(write_scenario, "q.yaml", micro_batch=2, samples=20000, avg_tokens=512, packing=False)
    # seq_len 2048, global batch 32 (BASE_SCENARIO): packed 20,000 x 512 / (2,048 x 32) = 156.25 -> 157 steps;
    # padded one sample per row, 20,000 / 32 = 625 steps; two samples a micro-batch are counted padded to seq_len
    assert (packed.time.steps, padded.time.steps) == (157, 625)
    assert padded.time.hours > 3 * packed.time.hours
    assert padded.memory.total == packed.memory.total  # a row is seq_len tokens either way
    assert any("75% of those tokens may be padding" in n for n in padded.notes)


def test_a_micro_batch_of_one_unpacked_sample_costs_its_own_tokens(write_scenario):
    """The launch files' collators pad a micro-batch to its longest sample: one sample is not padded at all, so it
    costs its mean length, not seq_len (it was counted at seq_len, 2-3x the time of the job launched)."""
    one, _ = _hours(write_scenario, "o.yaml", micro_batch=1, samples=20000, avg_tokens=512, packing=False)
    two, _ = _hours(write_scenario, "t.yaml", micro_batch=2, samples=20000, avg_tokens=512, packing=False)
    packed, _ = _hours(write_scenario, "p.yaml", micro_batch=1, samples=20000, avg_tokens=512)
    assert one.time.steps == two.time.steps == 625
    assert one.time.tokens_per_second * one.time.step_seconds == pytest.approx(32 * 512, rel=1e-6)
    assert two.time.tokens_per_second * two.time.step_seconds == pytest.approx(32 * 2048, rel=1e-6)
    assert one.time.hours < 0.75 * two.time.hours
    # the same tokens as packed, in rows of 512 instead of 2,048: smaller GEMMs fill the GPU less (gemm_fill)
    assert packed.time.hours < one.time.hours and one.time.mfu < packed.time.mfu
    assert one.memory.total < two.memory.total  # memory keeps seq_len rows: two of them hold more


def test_samples_longer_than_seq_len_are_mentioned_packed_or_padded(write_scenario):
    packed, _ = _hours(write_scenario, "p.yaml", samples=1000, avg_tokens=4096)
    assert any("avg_tokens 4,096 > seq_len" in n and "continue in the next row" in n for n in packed.notes)
    padded, _ = _hours(write_scenario, "q.yaml", samples=1000, avg_tokens=4096, packing=False)
    assert any("samples are cut, about 50% of the data's tokens are not trained" in n for n in padded.notes)


def test_padding_needs_samples(write_scenario, run_cli):
    result = run_cli("solve", write_scenario(data={"tokens": 1e7, "packing": False}))
    assert result.exit_code == 2 and "packing: false needs samples" in result.stderr
