"""Which published runs a plan resembles: the coverage map of the reference cases, and the band of plans outside it.

A plan's *cell* is the combination of the things that change the step-time model's error most (docs/time-model.md
section 4): GPU architecture, engine (hf_deepspeed, hf_fsdp, torchtune, nemo), method (full, lora, qlora), data
sharding (stage 0, stages 1-2, stage 3), offload (none, optimizer, all) and scale (one node or several). A cell is
*covered* when at least one scored reference throughput case lies in it. ``bench/loso.py --write`` stores the
covered cells in calibration.yaml ``accuracy.time_coverage.cells`` and the percentiles of the leave-one-source-out
ratios of the cases whose cell no OTHER source covers (``accuracy.time_coverage.uncovered``): how wrong the model
was, when it was, on a run unlike any it was fitted to. A plan outside the covered cells gets the wider of its own
band and that one (:func:`widest`), and its output says "no published run like this". The memory model has the same
map over its measured cases (``accuracy.memory_coverage``; the tail ratio_p99 widens too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NO_RUN = "no published run like this (GPU architecture, engine, method, sharding, offload, nodes): band widened"


def sharding_class(zero_stage: int) -> str:
    """zero0 (replicated or model-parallel only), zero1-2 (optimizer / gradient sharding), zero3 (parameters too)."""
    return "zero0" if zero_stage <= 0 else ("zero1-2" if zero_stage <= 2 else "zero3")


def engine(framework: str, sharding: str) -> str:
    """The engine a cell names: ``hf_<sharding>`` (hf_deepspeed, hf_fsdp) for the hf framework, else the framework."""
    return f"hf_{sharding}" if framework == "hf" else framework


def cell(arch: str, engine: str, method: str, zero_stage: int, offload: str, nodes: int) -> str:
    """The coverage cell of a plan, e.g. ``ampere/hf_fsdp/full/zero3/none/multi-node``."""
    scale = "multi-node" if nodes > 1 else "one-node"
    engine = "hf" if engine.startswith("hf_") and zero_stage <= 0 else engine  # no sharding: neither library runs
    return "/".join((arch, engine, method, sharding_class(zero_stage), offload, scale))


def widest(band: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """The band that spans both: the lower 10th and the higher 90th and 99th percentile (median and cases of ``band``).

    ratio_p99 is widened only where both bands have it (the memory bands).
    """
    out = {**band, "ratio_p10": min(float(band["ratio_p10"]), float(other["ratio_p10"])),
           "ratio_p90": max(float(band["ratio_p90"]), float(other["ratio_p90"]))}  # fmt: skip
    if band.get("ratio_p99") is not None and other.get("ratio_p99") is not None:
        out["ratio_p99"] = max(float(band["ratio_p99"]), float(other["ratio_p99"]))
    return out


def covered(accuracy: Mapping[str, Any], plan_cell: str | None, model: str = "time") -> bool | None:
    """Whether a published run lies in the plan's cell (``accuracy.<model>_coverage``, model time or memory).

    None when the calibration has no such coverage map.
    """
    cov = accuracy.get(f"{model}_coverage")
    if cov is None or plan_cell is None:
        return None
    return plan_cell in cov["cells"]
