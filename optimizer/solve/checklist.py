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
from optimizer.models import comm, hosts, timing

MIB = 2**20


def allreduce_check(dp: int, groups: int) -> str:
    """The all-reduce check's line: the data-parallel group it measures, one of the tp x pp groups when several."""
    line = f"all-reduce bus bandwidth over {dp} GPUs"
    return line if groups == 1 else f"{line} (one of the plan's {groups} data-parallel groups)"


def allreduce_command(dp: int, nodes: int) -> str:
    """nccl-tests all_reduce_perf over one data-parallel group of ``dp`` GPUs spread over ``nodes`` nodes.

    One node: one process driving ``dp`` GPUs (``-g``). Across nodes: one rank per GPU, ``dp / nodes`` per node
    (the group's ranks are spread over every node it spans, comm.dp_nodes).
    """
    if nodes <= 1:
        return f"all_reduce_perf -b 1G -e 1G -g {dp} (nccl-tests)"
    per_node = -(-dp // nodes)
    ranks = "1 rank" if per_node == 1 else f"{per_node} ranks"
    return f"mpirun -np {dp} all_reduce_perf -b 1G -e 1G -g 1 (nccl-tests; {ranks} per node on {nodes} nodes)"


def host_staged_busbw(pcie_gb_per_s: float, cards_in_node: int, tol: dict[str, Any]) -> float:
    """nccl-tests busbw (GB/s) of cards without peer-to-peer: PCIe x ``host_staged_busbw_efficiency`` / cards.

    The collectives go through host memory, one PCIe link's worth shared by the node's cards. The efficiency is the
    nccl-tests measurement in calibration ``hosts.checklist`` (0.51), not the time model's fitted
    ``link_efficiency.host`` (0.227), which also absorbs what training loses around the collectives: expecting the
    fitted figure from nccl-tests would pass a host that delivers half of what a healthy one does.
    """
    return pcie_gb_per_s * float(tol["host_staged_busbw_efficiency"]) / max(cards_in_node, 1)


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
    dp = int(cfg.dp[0])
    if dp > 1:
        bus = float(timing.dp_bandwidth(cfg, hw)[0]) / 1e9
        gpu, offer = space.gpus[int(c.offer_idx[i])], space.offers[int(c.offer_idx[i])]
        if int(c.nodes[i]) == 1 and not hosts.p2p(gpu, offer):  # what nccl-tests shows, not the fitted training rate
            bus = host_staged_busbw(gpu.pcie_gb_per_s, min(int(c.cards[i]), offer.cards_per_node), tol)
        groups = int(cfg.tp[0]) * int(cfg.pp[0])
        items.append(CheckItem(check=allreduce_check(dp, groups),
                               command=allreduce_command(dp, int(comm.dp_nodes(cfg, hw)[0])),
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
