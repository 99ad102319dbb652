"""Scaling sanity of the step-time model, as properties over random configurations (hypothesis).

- A faster GPU (every rate at least as high, same architecture family or a newer one with a higher achievable
  rate) never makes the same configuration slower.
- With PCIe-only cards more cards stop paying off sooner than with NVLink (the seeds' observation that per-GPU
  efficiency falls after about 4 PCIe cards; torchtune measured 0.54 and 0.49 per-GPU scaling on 2 and 4 RTX 4090s,
  facts torchtune-2x4090-lora-scaling and torchtune-4x4090-full-scaling).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optimizer.inputs.catalog import load_catalog
from optimizer.models import timing
from tests.conftest import timing_inputs

CATALOG = load_catalog()
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

configs = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["Llama-3.2-3B", "Llama-3.1-8B", "Qwen2.5-14B"]),
        "method": st.sampled_from(["full", "lora", "qlora"]),
        "seq_len": st.sampled_from([512, 2048, 8192]),
        "micro_batch": st.sampled_from([1, 2, 4]),
        "zero_stage": st.sampled_from([0, 1, 2, 3]),
        "offload": st.sampled_from(["none", "optimizer"]),
        "checkpointing": st.sampled_from(["none", "selective", "full"]),
        "cards": st.sampled_from([1, 2, 4, 8]),
        "tp": st.sampled_from([1, 2]),
    }
).filter(lambda c: c["tp"] <= c["cards"])


def _step(gpu: str, c: dict, **changes) -> float:
    scenario = {k: c[k] for k in ("model", "method", "seq_len")}
    if c["method"] == "full":
        scenario["lora"] = None
    layout = {k: c[k] for k in ("micro_batch", "zero_stage", "offload", "checkpointing", "tp")}
    args = timing_inputs(CATALOG, gpu, c["cards"], global_batch=64, **layout, **scenario, **changes)
    return float(timing.step_seconds(*args)[0])


@SETTINGS
@given(configs, st.floats(1.0, 4.0))
def test_scaling_every_rate_of_a_gpu_up_never_slows_a_step(c, k):
    gpu = CATALOG.gpus["A100-80G"]
    faster = {f: getattr(gpu, f) * k for f in ("bf16_tflops", "fp16_tflops", "fp32_tflops", "memory_bandwidth_gb_per_s",
                                              "nvlink_gb_per_s", "pcie_gb_per_s")}  # fmt: skip
    assert _step("A100-80G", c, gpu_changes=faster) <= _step("A100-80G", c) * (1 + 1e-12)


@SETTINGS
@given(configs, st.sampled_from([("A100-40G", "A100-80G"), ("A100-80G", "H100-SXM"), ("H100-SXM", "H200"),
                                 ("V100-32G", "A100-80G")]))  # fmt: skip
def test_a_faster_catalog_gpu_never_slows_the_same_configuration(c, pair):
    slow, fast = pair
    precision = "fp16" if "V100" in slow else "bf16"
    # Same rental terms for both (NVLink and node size of the slower GPU's offer), so only the GPU differs.
    offer = next(o for o in CATALOG.offers if o.gpu == slow and o.cards_per_node >= 8)
    same = {"nvlink": offer.nvlink, "cards_per_node": offer.cards_per_node}
    assert _step(fast, c, precision=precision, offer_changes=same) <= _step(
        slow, c, precision=precision, offer_changes=same
    ) * (1 + 1e-12)


def _per_gpu_scaling(gpu: str, c: dict, nvlink: bool) -> np.ndarray:
    """tokens/s per GPU at 1, 2, 4, 8 data-parallel cards over tokens/s on one card."""
    scenario = {k: c[k] for k in ("model", "method", "seq_len")}
    if c["method"] == "full":
        scenario["lora"] = None
    args = timing_inputs(CATALOG, gpu, [1, 2, 4, 8], zero_stage=c["zero_stage"], micro_batch=c["micro_batch"],
                         checkpointing=c["checkpointing"], offer_changes={"nvlink": nvlink}, global_batch=64,
                         **scenario)  # fmt: skip
    tps = timing.job_time(*args)["tokens_per_second"]
    return tps / tps[0] / np.array([1, 2, 4, 8])


@SETTINGS
@given(configs.filter(lambda c: c["zero_stage"] == 3 or c["method"] == "full"))
def test_pcie_cards_lose_more_per_gpu_throughput_than_nvlink_as_cards_are_added(c):
    nvlink = _per_gpu_scaling("A100-80G", c, nvlink=True)
    pcie = _per_gpu_scaling("A100-80G", c, nvlink=False)
    host = _per_gpu_scaling("RTX-4090", c, nvlink=False)
    assert np.all(pcie[1:] <= nvlink[1:] + 1e-12)
    assert np.all(host[1:] <= pcie[1:] + 1e-12)  # no P2P: staged through host memory, shared by the cards


def test_per_gpu_efficiency_falls_below_two_thirds_after_four_pcie_cards():
    # 7B full fine-tuning, FSDP, micro-batch 4 at 2048 tokens: on 8 RTX 4090s (no P2P) each card keeps under
    # 2/3 of its single-card throughput, while 8 NVLink A100s keep over 90%.
    c = {"model": "Llama-3.1-8B", "method": "full", "seq_len": 2048, "zero_stage": 3, "micro_batch": 4,
         "checkpointing": "full"}  # fmt: skip
    assert _per_gpu_scaling("RTX-4090", c, nvlink=False)[2:].max() < 2 / 3
    assert _per_gpu_scaling("A100-80G", c, nvlink=True)[3] > 0.9
