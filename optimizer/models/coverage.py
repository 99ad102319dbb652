"""Which published runs a plan resembles: the coverage map of the reference cases, and the band of plans outside it.

A plan's *cell* is the combination of the things that change the step-time model's error most (docs/time-model.md
section 4): GPU architecture, engine (hf_deepspeed, hf_fsdp, torchtune, nemo), method (full, lora, qlora), data
sharding (stage 0, stages 1-2, stage 3), offload (none, optimizer, all) and scale (one node or several). A cell is
*covered* when at least one scored reference throughput case lies in it. ``bench/loso.py --write`` stores the
covered cells in calibration.yaml ``accuracy.time_coverage.cells`` and the percentiles of the leave-one-source-out
ratios of the cases whose cell no OTHER source covers (``accuracy.time_coverage.uncovered``): how wrong the model
was, when it was, on a run unlike any it was fitted to. A plan outside the covered cells gets the wider of its own
band and that one (:func:`widest`), and its output says "no published run like this".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NO_RUN = "no published run like this (GPU architecture, engine, method, sharding, offload, nodes): band widened"


def sharding_class(zero_stage: int) -> str:
    """zero0 (replicated or model-parallel only), zero1-2 (optimizer / gradient sharding), zero3 (parameters too)."""
    return "zero0" if zero_stage <= 0 else ("zero1-2" if zero_stage <= 2 else "zero3")


def cell(arch: str, engine: str, method: str, zero_stage: int, offload: str, nodes: int) -> str:
    """The coverage cell of a plan, e.g. ``ampere/hf_fsdp/full/zero3/none/multi-node``."""
    scale = "multi-node" if nodes > 1 else "one-node"
    engine = "hf" if engine.startswith("hf_") and zero_stage <= 0 else engine  # no sharding: neither library runs
    return "/".join((arch, engine, method, sharding_class(zero_stage), offload, scale))


def widest(band: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """The band that spans both: the lower 10th and the higher 90th percentile (median and cases of ``band``)."""
    return {**band, "ratio_p10": min(float(band["ratio_p10"]), float(other["ratio_p10"])),
            "ratio_p90": max(float(band["ratio_p90"]), float(other["ratio_p90"]))}  # fmt: skip


def covered(accuracy: Mapping[str, Any], plan_cell: str | None) -> bool | None:
    """Whether a published run lies in the plan's cell; None when the calibration has no coverage map."""
    cov = accuracy.get("time_coverage")
    if cov is None or plan_cell is None:
        return None
    return plan_cell in cov["cells"]
