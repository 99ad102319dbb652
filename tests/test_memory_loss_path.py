"""The loss path, FSDP's gradient pool and FSDP with pipeline stages against numbers worked out by hand.

Each test counts the tensors alive at the moment that sets the peak (comments give the tensor, its dtype and its
bytes per logit or per parameter) and compares the model's bytes with that count written out as an integer.
Sources: optimizer/models/activations.py logits_bytes and optimizer/models/memory.py fsdp_gradient_pool_bytes,
zero3_gathered_bytes (their docstrings cite the framework lines).
"""

from __future__ import annotations

import numpy as np
import pytest

from optimizer.models import activations, memory
from tests.memory_builders import LLAMA2_7B, LLAMA31_8B, cfg, consts, job

BF16, FP32 = 2, 4  # bytes per element
# Llama-3.1-8B, one sequence of 8192 tokens: T x V = 8192 x 128,256 = 1,050,673,152 logits
LOGITS_8B = 8192 * 128_256


def _one(fn, j, c) -> int:
    return int(fn(j, c, consts())[0])


def test_hf_fp32_upcast_loss_peaks_at_backward_start_with_12_bytes_per_logit():
    # transformers ForCausalLMLoss: logits = logits.float(); cross_entropy(...)
    forward_end = BF16 + FP32 + FP32  # bf16 logits + fp32 upcast + fp32 log-softmax output = 10
    backward_start = FP32 + FP32 + FP32  # saved log-softmax + grad into it + grad out of it = 12
    assert (forward_end, backward_start) == (10, 12)
    j = job(arch=LLAMA31_8B, framework="hf", loss="standard", seq_len=8192)
    # 1,050,673,152 x 12 = 12,608,077,824 B (11.74 GiB)
    assert _one(activations.logits_bytes, j, cfg()) == 12_608_077_824 == LOGITS_8B * max(forward_end, backward_start)


def test_hf_default_loss_is_the_fp32_upcast_one():
    auto = job(arch=LLAMA31_8B, framework="hf", seq_len=8192)
    assert _one(activations.logits_bytes, auto, cfg()) == 12_608_077_824


def test_vocabulary_parallel_logits_halve_with_tp_2():
    # torchtitan loss_parallel / Megatron's vocab-parallel loss: 12,608,077,824 / 2 = 6,304,038,912
    j = job(arch=LLAMA31_8B, framework="hf", loss="standard", seq_len=8192, loss_parallel=True)
    assert _one(activations.logits_bytes, j, cfg(tp=2)) == 6_304_038_912
    # Megatron (nemo) shards the loss by default: 1,050,673,152 logits x 6 B (megatron) / 2 = 3,152,019,456
    nemo = job(arch=LLAMA31_8B, framework="nemo", seq_len=8192)
    assert _one(activations.logits_bytes, nemo, cfg(tp=2)) == 3_152_019_456


@pytest.mark.parametrize("framework", ["hf", "torchtune"])
def test_gathered_logits_keep_the_full_vocabulary_on_every_tp_rank(framework):
    # ColwiseParallel(output_layouts=Replicate()) on the output layer (torchtune's TP plans, KempnerForge): every rank
    # all-gathers the full T x V logits and runs the whole fp32 loss on them: 1,050,673,152 x 12 at any tp
    j = job(arch=LLAMA31_8B, framework=framework, loss="standard", seq_len=8192)
    assert [_one(activations.logits_bytes, j, cfg(tp=t)) for t in (1, 2, 4, 8)] == [12_608_077_824] * 4


def test_a_16bit_loss_whose_loop_keeps_the_logits_peaks_at_8_bytes_per_logit():
    # KempnerForge: bf16 logits (no .float()), F.cross_entropy, the loop's logits alive through backward
    forward_end = BF16 + BF16  # held logits + saved bf16 log-softmax = 4
    backward_start = BF16 + BF16 + BF16 + BF16  # held logits + saved log-softmax + the two bf16 gradients = 8
    j = job(arch=LLAMA31_8B, framework="torchtune", loss="standard_16bit_held", seq_len=8192)
    # 1,050,673,152 x 8 = 8,405,385,216 B
    assert _one(activations.logits_bytes, j, cfg()) == 8_405_385_216 == LOGITS_8B * max(forward_end, backward_start)


def test_loop_that_keeps_the_logits_adds_their_fp32_copy_in_backward():
    # torchtune recipes before July 2024: the shifted fp32 logits are still referenced when backward starts
    backward_start = FP32 + FP32 + FP32 + FP32  # held logits + saved log-softmax + two fp32 gradients = 16
    j = job(arch=LLAMA31_8B, framework="torchtune", loss="standard_held", seq_len=8192)
    # 1,050,673,152 x 16 = 16,810,770,432 B
    assert _one(activations.logits_bytes, j, cfg()) == 16_810_770_432 == LOGITS_8B * backward_start


def test_16bit_cross_entropy_keeps_6_bytes_per_logit():
    # Qwen-1 remote code: lm_logits (16-bit), shifted .contiguous() copy, log-softmax, all 2 B; backward the same
    forward_end = BF16 + BF16 + BF16
    j = job(arch=LLAMA31_8B, framework="hf", loss="standard_16bit", seq_len=8192)
    # 1,050,673,152 x 6 = 6,304,038,912 B
    assert _one(activations.logits_bytes, j, cfg()) == 6_304_038_912 == LOGITS_8B * forward_end


def test_compiled_hf_loss_keeps_the_bf16_logits_and_their_bf16_gradient():
    # upcast + log-softmax + nll fused by Inductor: saved bf16 input 2 + bf16 gradient 2 = 4
    j = job(arch=LLAMA31_8B, framework="hf", loss="standard", seq_len=8192, compile=True)
    # 1,050,673,152 x 4 = 4,202,692,608 B
    assert _one(activations.logits_bytes, j, cfg()) == 4_202_692_608 == LOGITS_8B * (BF16 + BF16)


def test_torchtune_compile_leaves_its_standard_loss_at_12_bytes():
    # compile_loss receives logits the eager TransformerDecoder already upcast; the ladder shows no saving
    j = job(arch=LLAMA31_8B, framework="torchtune", loss="standard", seq_len=8192, compile=True)
    assert _one(activations.logits_bytes, j, cfg()) == 12_608_077_824


@pytest.mark.parametrize(
    ("framework", "loss", "compile", "kind"),
    [("hf", "auto", False, "standard"), ("hf", "standard", True, "standard_compiled"),
     ("torchtune", "auto", False, "chunked"), ("torchtune", "auto", True, "chunked_compiled"),
     ("torchtune", "standard", True, "standard"), ("nemo", "auto", False, "megatron"),
     ("hf", "standard_16bit", True, "standard_16bit"), ("hf", "fused", False, "fused")],
)  # fmt: skip
def test_loss_kind_follows_framework_loss_and_compile(framework, loss, compile, kind):
    assert activations.loss_kind(job(framework=framework, loss=loss, compile=compile), consts()) == kind


def _fsdp_full_7b():
    # Llama-2-7B full fine-tuning, HF + FSDP (fp32 sharded states), 2048 tokens, full checkpointing
    return job(arch=LLAMA2_7B, framework="hf", sharding="fsdp", loss="standard", seq_len=2048)


def test_fsdp_gradient_pool_is_the_smaller_of_gradients_and_live_activations():
    # G = P x 4 B / dp = 6,738,415,616 x 4 / 8 = 3,369,207,808
    # A = T (2h L + c_layer) = 2048 x (2 x 4096 x 32 + 194,688) = 2048 x 456,832 = 935,591,936
    #   (c_layer eager full fine-tuning = 22h + 4h_kv + 8I + 4a = 90,112 + 16,384 + 88,064 + 128 = 194,688)
    # LOG = 2048 x 32,000 x 12 = 786,432,000; G_out = 0 at stage 3
    # pool = min(G, A + LOG) = min(3,369,207,808, 1,722,023,936) = 1,722,023,936
    c = cfg(dp=8, zero=3, checkpointing="full")
    assert _one(memory.fsdp_gradient_pool_bytes, _fsdp_full_7b(), c) == 1_722_023_936


def test_fsdp_gradient_pool_is_reserved_not_allocated():
    c = cfg(dp=8, zero=3, checkpointing="full")
    parts = memory.breakdown(_fsdp_full_7b(), c, consts())
    pool = 1_722_023_936
    reserved = memory.peak_for_metric(parts, "reserved")[0]
    allocated = memory.peak_for_metric(parts, "allocated")[0]
    assert reserved - allocated == parts["fragmentation"][0] >= pool


@pytest.mark.parametrize(
    ("overrides", "why"),
    [({"grad_accum": 2}, "persistent gradients are counted in full already"),
     ({"zero": 0, "dp": 1}, "no reduce-scatter below stage 2")],
)  # fmt: skip
def test_fsdp_gradient_pool_is_zero_where_gradients_are_not_transient_shards(overrides, why):
    c = cfg(**{"dp": 8, "zero": 3, "checkpointing": "full", **overrides})
    assert _one(memory.fsdp_gradient_pool_bytes, _fsdp_full_7b(), c) == 0, why


def test_deepspeed_has_no_fsdp_gradient_pool():
    j = job(arch=LLAMA2_7B, framework="hf", sharding="deepspeed", seq_len=2048)
    assert _one(memory.fsdp_gradient_pool_bytes, j, cfg(dp=8, zero=3, checkpointing="full")) == 0


def test_fsdp_pipeline_stage_stays_unsharded_with_its_accumulated_gradients():
    # pp 2: each stage holds P / 2 parameters unsharded in bf16 (2 B) plus fp32 accumulated gradients (4 B)
    # (2 + 4) x 6,738,415,616 / 2 = 20,215,246,848 B, more than two gathered layers
    c = cfg(pp=2, dp=4, zero=3, grad_accum=8, checkpointing="full")
    assert _one(memory.zero3_gathered_bytes, _fsdp_full_7b(), c) == 20_215_246_848


def test_fsdp_without_pipeline_gathers_units_only():
    c_pp1, c_pp2 = cfg(dp=8, zero=3), cfg(pp=2, dp=4, zero=3, grad_accum=8)
    assert _one(memory.zero3_gathered_bytes, _fsdp_full_7b(), c_pp1) < _one(
        memory.zero3_gathered_bytes, _fsdp_full_7b(), c_pp2
    ) / 10


@pytest.mark.parametrize("checkpointing", ["none", "full"])
def test_new_terms_vectorised_equal_a_loop_of_scalar_calls(checkpointing):
    # five rows mixing tp, pp, dp, stage and accumulation, evaluated at once and one by one
    tp, pp, dp, zero, ga = [1, 2, 1, 1, 2], [1, 1, 2, 1, 1], [8, 4, 4, 1, 2], [3, 3, 3, 0, 2], [1, 1, 8, 1, 1]
    rows = cfg(n=5, tp=np.array(tp), pp=np.array(pp), dp=np.array(dp), zero=np.array(zero), grad_accum=np.array(ga),
               checkpointing=checkpointing)  # fmt: skip
    j = _fsdp_full_7b()
    for fn in (memory.fsdp_gradient_pool_bytes, memory.zero3_gathered_bytes, activations.logits_bytes):
        vector = fn(j, rows, consts())
        one_by_one = [_one(fn, j, cfg(tp=t, pp=p, dp=d, zero=z, grad_accum=g, checkpointing=checkpointing))
                      for t, p, d, z, g in zip(tp, pp, dp, zero, ga, strict=True)]  # fmt: skip
        assert vector.tolist() == one_by_one, fn.__name__
