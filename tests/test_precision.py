"""Issue 20 item 3: a model published in bf16 is not trained in fp16 unless allowed, and then with a warning; the
catalog states each model's training dtype with its source and each GPU variant's own figures."""

from __future__ import annotations

import pytest

from optimizer.solve.context import FP16_FOR_BF16
from optimizer.solve.planner import estimate_scenario, solve_scenario

V100_ONLY = {"allow": {"gpus": ["V100-32G"]}}


def _model(catalog, name: str):
    return next(m for m in catalog.models.values() if m.name == name)


def test_every_catalog_model_states_its_training_dtype_from_its_config(catalog):
    for model in catalog.models.values():
        assert model.torch_dtype in ("bfloat16", "float16"), model.name
        assert "config.json torch_dtype" in (model.torch_dtype_source or ""), model.name
    # Llama-2's configs say float16; Llama-3.1 and Qwen2.5 bfloat16
    assert _model(catalog, "Llama-2-7B").torch_dtype == "float16"
    assert _model(catalog, "Llama-3.1-8B").torch_dtype == _model(catalog, "Qwen2.5-7B").torch_dtype == "bfloat16"


def test_a_bf16_model_on_cards_without_bf16_is_refused_naming_the_switch(run_cli, write_scenario):
    # pinned to the card: no configuration at all, a one-line input error naming the switch
    result = run_cli("solve", write_scenario(plan={"gpu": "V100-32G"}))
    assert result.exit_code == 2 and "allow.fp16_for_bf16" in result.stderr and "Traceback" not in result.stderr
    # allow-listed: infeasible, and the explanation says why the card has no plan
    result = run_cli("solve", write_scenario("a.yaml", **V100_ONLY))
    text = " ".join(result.stdout.split())
    assert result.exit_code == 1 and "V100-32G, V100-PCIe-32G (no bf16) are not proposed" in text


def test_allowed_fp16_for_a_bf16_model_carries_the_warning(write_scenario):
    best = solve_scenario(write_scenario(allow={"gpus": ["V100-32G"], "fp16_for_bf16": True})).best
    assert best.plan.gpu == "V100-32G" and best.plan.precision.value == "fp16"
    assert FP16_FOR_BF16 in best.notes


def test_an_fp16_trained_model_uses_fp16_on_volta_without_a_warning(write_scenario):
    best = solve_scenario(write_scenario(model="Llama-2-7B", **V100_ONLY)).best
    assert best.plan.precision.value == "fp16" and FP16_FOR_BF16 not in best.notes


def test_a_pinned_fp16_on_a_bf16_card_is_run_and_warned(write_scenario):
    pins = {"gpu": "A100-80G", "cards": 1, "micro_batch": 1, "precision": "fp16"}
    est = estimate_scenario(write_scenario(), pins)
    assert est.plan.precision.value == "fp16" and FP16_FOR_BF16 in est.notes
    bf16 = estimate_scenario(write_scenario("b.yaml"), {**pins, "precision": "bf16"})
    assert FP16_FOR_BF16 not in bf16.notes


def test_the_v100_pcie_card_is_timed_at_its_own_peak(catalog, write_scenario):
    sxm, pcie = catalog.gpus["V100-32G"], catalog.gpus["V100-PCIe-32G"]
    assert (sxm.fp16_tflops, pcie.fp16_tflops) == (125, 112) and (sxm.tdp_w, pcie.tdp_w) == (300, 250)
    assert pcie.nvlink_gb_per_s == 0 and "datasheet" in pcie.source
    assert next(o for o in catalog.offers if o.id == "akash-v100-32g-pcie").gpu == "V100-PCIe-32G"
    # the SXM2 card is rented only as AWS p3dn, a whole 8-card instance: both cards are timed at 8 (QLoRA's data
    # parallel all-reduce moves the adapters only, so the peak still sets the step)
    assert {(o.sold_as, o.cards_per_node) for o in catalog.offers if o.gpu == "V100-32G"} == {("instance", 8)}
    pins = {"cards": 8, "micro_batch": 1, "checkpointing": "full"}
    doc = {"model": "Llama-2-7B", "method": "qlora"}
    a = estimate_scenario(write_scenario(**doc), {"gpu": "V100-32G", **pins})
    b = estimate_scenario(write_scenario("p.yaml", **doc), {"gpu": "V100-PCIe-32G", **pins})
    # same model FLOPs per step; the step's compute share scales with the peak: slower on the PCIe card
    assert b.time.step_seconds > a.time.step_seconds
    assert b.time.step_seconds / a.time.step_seconds == pytest.approx(125 / 112, rel=0.12)


def test_the_dgx2h_v100_has_the_peak_megatron_lms_posts_measured_against(catalog):
    # 39 TFLOP/s is "30%" and 62.4 "48% of the theoretical peak FLOPS for a single GPU in a DGX2-H server"; the card
    # is there for those reference runs only, so no offer rents it
    card = catalog.gpus["V100-SXM3-32G-H"]
    assert card.arch == "volta" and card.fp16_tflops == pytest.approx(39 / 0.30, abs=0.5) == pytest.approx(62.4 / 0.48)
    assert card.tdp_w is None and not any(o.gpu == card.id for o in catalog.offers)
