"""After renting: what to measure before training, what the plan expects, and when to stop and re-plan.

The seeds' "verify before you train" as numbers from the same models that chose the plan (candidate ``i`` of a
space.Space):

- nvidia-smi memory total per card = the capacity the plan used (usable, else nominal);
- bandwidthTest host->device = the PCIe rate the time model uses (pcie_gb_per_s x link_efficiency.pcie);
  device->device against the GPU's HBM peak (CUDA samples' bandwidthTest);
- nccl-tests all_reduce_perf bus bandwidth for the plan's data-parallel group = the per-GPU link rate the time
  model uses for it (timing.dp_bandwidth; nccl-tests busbw convention, formulas.md Part II section 3.2);
- memory used in the first steps = the predicted per-GPU peak, limited by capacity x (1 - headroom);
- step time = the predicted step, stop above the 90th percentile of the plan's own time band (uncertainty.band:
  the held-out errors of its group, widened where no published run is like it or its cards lack peer-to-peer).
Tolerances are calibration.yaml ``hosts.checklist``.
"""

from __future__ import annotations

from typing import Any

from optimizer.inputs.schema_plan import CheckItem
from optimizer.models import timing

MIB = 2**20


def for_row(space: Any, i: int, time_ratio_p90: float | None = None) -> list[CheckItem]:
    """The after-renting checks of candidate ``i`` (empty without the calibration ``hosts`` section).

    ``time_ratio_p90``: the plan's own time band's 90th percentile (uncertainty.band); None without accuracy bands.
    """
    cal = space.hosts_cal
    if not cal:
        return []
    tol = cal["checklist"]
    c = space.cand
    hw, cfg = c.hw.take(slice(i, i + 1)), c.cfg.take(slice(i, i + 1))
    capacity_mib = float(hw.capacity_bytes[0]) / MIB
    h2d = float(hw.pcie_bytes_per_s[0]) / 1e9
    hbm = float(hw.hbm_bytes_per_s[0]) / 1e9
    limit_mib = capacity_mib * (1.0 - space.scenario.headroom)
    step = float(c.time["step_seconds"][i])
    ratio = time_ratio_p90 if time_ratio_p90 is not None else 1.0
    items = [
        CheckItem(check="GPU memory per card", command="nvidia-smi --query-gpu=memory.total --format=csv",
                  expected=round(capacity_mib), unit="MiB",
                  stop_if=f"below {capacity_mib * (1 - float(tol['memory_total_tolerance'])):,.0f} MiB"),
        CheckItem(check="host-to-device bandwidth", command="bandwidthTest --htod --memory=pinned (cuda-samples)",
                  expected=round(h2d, 2), unit="GB/s",
                  stop_if=f"below {h2d * float(tol['h2d_stop_below']):,.1f} GB/s"),
        CheckItem(check="device-to-device bandwidth", command="bandwidthTest --dtod (cuda-samples)",
                  expected=round(hbm, 1), unit="GB/s (HBM peak)",
                  stop_if=f"below {hbm * float(tol['d2d_stop_below']):,.0f} GB/s"),
    ]  # fmt: skip
    group = int(c.cards[i]) // int(cfg.tp[0])
    if group > 1:
        bus = float(timing.dp_bandwidth(cfg, hw)[0]) / 1e9
        per_node = min(int(c.cards[i]), int(hw.cards_per_node[0]))
        nodes = int(c.nodes[i])
        cmd = (f"all_reduce_perf -b 1G -e 1G -g {per_node}" if nodes == 1 else
               f"mpirun -np {group} all_reduce_perf -b 1G -e 1G -g 1 (across the {nodes} nodes)")  # fmt: skip
        items.append(CheckItem(check=f"all-reduce bus bandwidth over {group} GPUs", command=f"{cmd} (nccl-tests)",
                               expected=round(bus, 2), unit="GB/s busbw",
                               stop_if=f"below {bus * float(tol['busbw_stop_below']):,.1f} GB/s"))  # fmt: skip
    items += [
        CheckItem(check="memory used in the first steps",
                  command="nvidia-smi --query-gpu=memory.used --format=csv -l 5",
                  expected=round(float(c.mem["total"][i]) / MIB), unit="MiB",
                  stop_if=f"above {limit_mib:,.0f} MiB (capacity less headroom): re-plan before it runs out"),
        CheckItem(check="step time", command="the trainer's log: seconds per optimizer step after warm-up",
                  expected=round(step, 3), unit="s",
                  stop_if=f"above {step * ratio:,.2f} s (90th percentile of the plan's time band)"),
    ]  # fmt: skip
    return items
