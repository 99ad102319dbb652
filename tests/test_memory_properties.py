"""Monotonicity of the per-GPU peak over random configurations (hypothesis).

Memory never drops when the sequence, the micro-batch or the LoRA rank grows, and never grows when dp grows under
ZeRO >= 1 or when tp grows (the issue's consistency requirements). max_examples is modest to keep the suite fast.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from optimizer.models import memory
from tests.memory_builders import LLAMA2_7B, LLAMA31_8B, LLAMA32_3B, cfg, consts, job

CONSTS = consts()
SETTINGS = settings(max_examples=60, deadline=None)

jobs = st.fixed_dictionaries(
    {
        "arch": st.sampled_from([LLAMA2_7B, LLAMA31_8B, LLAMA32_3B]),
        "method": st.sampled_from(["full", "lora", "qlora"]),
        "rank": st.sampled_from([8, 16, 64]),
        "targets": st.sampled_from([["q_proj", "v_proj"], ["all-linear"], ["o_proj", "down_proj", "lm_head"]]),
        "framework": st.sampled_from(["hf", "torchtune", "nemo"]),
        "sharding": st.sampled_from(["deepspeed", "fsdp"]),
        "attention": st.sampled_from(["flash", "sdpa", "eager"]),
        "loss": st.sampled_from(["auto", "standard", "chunked", "fused"]),
        "seq_len": st.sampled_from([256, 1024, 4096]),
        "dropout": st.sampled_from([0.0, 0.1]),
    }
)
configs = st.fixed_dictionaries(
    {
        "tp": st.sampled_from([1, 2, 4]),
        "pp": st.sampled_from([1, 2]),
        "dp": st.sampled_from([1, 2, 8]),
        "zero": st.integers(0, 3),
        "offload": st.sampled_from(["none", "optimizer", "all"]),
        "micro_batch": st.sampled_from([1, 2, 4]),
        "grad_accum": st.sampled_from([1, 2, 8]),
        "checkpointing": st.sampled_from(["none", "selective", "full"]),
        "precision": st.sampled_from(["bf16", "fp32"]),
        "optimizer": st.sampled_from(["adamw", "adamw_8bit", "sgd"]),
    }
)


def total(j: dict, c: dict) -> int:
    return int(memory.breakdown(job(**j), cfg(**c), CONSTS)["total"][0])


@SETTINGS
@given(jobs, configs)
def test_longer_sequences_never_need_less_memory(j, c):
    assert total({**j, "seq_len": 2 * j["seq_len"]}, c) >= total(j, c)


@SETTINGS
@given(jobs, configs)
def test_larger_micro_batches_never_need_less_memory(j, c):
    assert total(j, {**c, "micro_batch": 2 * c["micro_batch"]}) >= total(j, c)


@SETTINGS
@given(jobs.filter(lambda j: j["method"] != "full"), configs)
def test_higher_lora_rank_never_needs_less_memory(j, c):
    assert total({**j, "rank": 2 * j["rank"]}, c) >= total(j, c)


@SETTINGS
@given(jobs, configs.filter(lambda c: c["zero"] >= 1))
def test_more_data_parallel_ranks_never_need_more_memory_under_zero(j, c):
    assert total(j, {**c, "dp": 2 * c["dp"]}) <= total(j, c)


@SETTINGS
@given(jobs, configs)
def test_more_tensor_parallel_ranks_never_need_more_memory(j, c):
    assert total(j, {**c, "tp": 2 * c["tp"]}) <= total(j, c)
