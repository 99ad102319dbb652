"""Interleaved pipelines only where Megatron-Core runs them: M = grad_accum micro-batches a multiple of pp.

Megatron-Core's interleaved 1F1B schedule (NVIDIA/Megatron-LM megatron/core/pipeline_parallel/schedules.py,
forward_backward_pipelining_with_interleaving) takes a virtual stage's micro-batches pp at a time and raises when
M is not a multiple of pp. Llama-3.1-70B has 80 layers: pp 8 gives 10 layers per stage, interleaved as 5 chunks.
"""

from __future__ import annotations

import pytest

from optimizer.inputs.catalog import load_scenario
from optimizer.inputs.errors import InputError
from optimizer.launch import launch_settings
from optimizer.solve import validator
from optimizer.solve.planner import prepare, solve_scenario
from tests.conftest import scenario_doc

NEMO = {"framework": "nemo", "optimizer": "adamw", "attention": "flash"}


def _doc(global_batch: int, **pins):
    return scenario_doc(model="Llama-3.1-70B", method="full", lora=None, training=NEMO, global_batch=global_batch,
                        data={"tokens": 2.0e7, "epochs": 1}, budget=None, deadline_hours=None,
                        plan={"gpu": "A100-80G", "cards": 64, "tp": 8, "pp": 8, "micro_batch": 1, **pins})  # fmt: skip


@pytest.mark.parametrize(("global_batch", "chunks"), [(12, 1), (24, 5)])
def test_the_solved_70b_pp8_plan_interleaves_only_a_multiple_of_8_micro_batches(write_scenario, global_batch,
                                                                                  chunks):  # fmt: skip
    # 64 cards = tp 8 x pp 8 x dp 1: grad_accum = global_batch. 12 mod 8 = 4 (Megatron raises): plain 1F1B.
    path = write_scenario(doc=_doc(global_batch))
    est = solve_scenario(path).best
    assert est.plan is not None and (est.plan.pp, est.plan.dp, est.plan.grad_accum) == (8, 1, global_batch)
    assert est.plan.virtual_pipeline == chunks
    strategy = launch_settings(load_scenario(path), est.plan, cards_per_node=8)["nemo"]["strategy"]
    assert strategy.get("virtual_pipeline_model_parallel_size") == (chunks if chunks > 1 else None)
    assert validator.check_plan(*prepare(path)[:2], est) == []


def test_a_pin_megatron_would_refuse_is_a_one_line_error(write_scenario):
    with pytest.raises(InputError) as e:
        solve_scenario(write_scenario(doc=_doc(12, virtual_pipeline=5)))
    assert e.value.field == "plan.virtual_pipeline" and "multiple of plan.pp x micro_batch = 8" in str(e.value)
    with pytest.raises(InputError) as e:
        solve_scenario(write_scenario(doc=_doc(96, virtual_pipeline=5, grad_accum=12)))
    assert e.value.field == "plan.virtual_pipeline" and "grad_accum a multiple of plan.pp 8" in str(e.value)
    est = solve_scenario(write_scenario(doc=_doc(24, virtual_pipeline=5))).best
    assert est.plan is not None and est.plan.virtual_pipeline == 5


def test_the_validator_refuses_interleaving_over_a_partial_group(write_scenario):
    path = write_scenario(doc=_doc(24))
    est = solve_scenario(path).best
    assert est.plan is not None and est.plan.virtual_pipeline == 5
    bad = est.model_copy(update={"plan": est.plan.model_copy(update={"grad_accum": 12})})
    found = validator.check_plan(*prepare(path)[:2], bad)
    assert any("Megatron's interleaved schedule refuses it" in m for m in found)
