"""FSDP gradient accumulation without a reduce per micro-batch (memory.holds_unsharded_gradients, issue 21).

transformers' Trainer runs every micro-batch but the last under ``accelerator.no_sync`` (FSDP) and KempnerForge
under ``set_requires_gradient_sync(False)``: the full gradients stay unsharded until the last micro-batch. Expected
values are counted by hand from the hf_fsdp profile (4 B fp32 gradients under autocast) and torchtune's (2 B).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from optimizer.models import memory
from tests.memory_builders import LLAMA2_7B, cfg, consts, job

P = LLAMA2_7B.params


def test_hf_fsdp_with_accumulation_holds_the_whole_fp32_gradient():
    j = job(framework="hf", sharding="fsdp")
    grads = memory.gradient_bytes(j, cfg(n=2, dp=4, zero=3, grad_accum=[1, 4]), consts())
    assert grads[0] == pytest.approx(4 * P / 4, rel=1e-9)  # reduce-scattered every micro-batch: a quarter
    assert grads[1] == pytest.approx(4 * P, rel=1e-9)  # no_sync: unsharded until the last micro-batch


def test_the_scenario_setting_overrides_the_engine_default():
    c = cfg(dp=4, zero=3, grad_accum=4)
    synced = replace(job(framework="hf", sharding="fsdp"), reduce_every_micro_batch=True)
    assert memory.gradient_bytes(synced, c, consts())[0] == pytest.approx(4 * P / 4, rel=1e-9)
    held = replace(job(framework="torchtune"), reduce_every_micro_batch=False)
    assert memory.gradient_bytes(held, c, consts())[0] == pytest.approx(2 * P, rel=1e-9)
    # torchtune's recipes reduce every micro-batch by default
    assert memory.gradient_bytes(job(framework="torchtune"), c, consts())[0] == pytest.approx(2 * P / 4, rel=1e-9)


def test_deepspeed_lora_and_pipelines_are_not_touched():
    c = cfg(dp=4, zero=3, grad_accum=4)
    held = memory.holds_unsharded_gradients
    assert not held(job(framework="hf", sharding="deepspeed"), c, consts())[0]
    assert not held(job(framework="hf", sharding="fsdp"), cfg(dp=4, zero=3, grad_accum=4, pp=2), consts())[0]
    lora = job(framework="hf", sharding="fsdp", method="lora")
    assert held(lora, c, consts())[0]  # held, but only the adapters' gradients
    assert memory.gradient_bytes(lora, c, consts())[0] == pytest.approx(4 * memory.trainable_params(lora), rel=1e-9)


def test_fsdp2_with_an_fp32_reduce_dtype_accumulates_the_held_gradients_at_4_bytes():
    # KempnerForge: bf16 parameters, MixedPrecisionPolicy(reduce_dtype=float32), no reduce until the last micro-batch:
    # FSDPParam.to_accumulated_grad_if_needed keeps the unsharded gradient in fp32, 4 B x P instead of 2 B x P
    held = replace(job(framework="torchtune"), reduce_every_micro_batch=False, reduce_dtype="fp32")
    c = cfg(n=2, dp=4, zero=3, grad_accum=[1, 4])
    grads = memory.gradient_bytes(held, c, consts())
    assert grads[1] == pytest.approx(4 * P, rel=1e-9)
    # reduced every micro-batch (accumulation 1), the sharded bf16 gradients are untouched: 2 B x P / 4
    assert grads[0] == pytest.approx(2 * P / 4, rel=1e-9)
    # and a reduce_dtype without held gradients changes nothing
    synced = replace(held, reduce_every_micro_batch=True)
    assert memory.gradient_bytes(synced, c, consts())[1] == pytest.approx(2 * P / 4, rel=1e-9)
