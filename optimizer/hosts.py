"""What the rented machine adds to a plan: usable card memory, peer-to-peer, host RAM, disk, start-up, spot.

The offer's host facts (catalogs/offers ``host``, ``usable_memory_mib``, ``p2p``, ``spot``) become per-row arrays
here, for space.py (every candidate) and validator.py (one plan) alike:

- capacity: the memory a process sees, the offer's ``usable_memory_mib``, else the GPU's, else ``memory_gib``;
- P2P: the offer's ``p2p``, else the GPU's;
- host RAM need per node: offloaded states (memory.cpu_offload) + ``hosts.host_ram_per_rank_gib`` x ranks in the
  node; a plan needing more than the offer's host RAM (``host.ram_gib``, or ``ram_gib_per_card`` x cards in the
  node) does not fit;
- disk need per node (overheads.disk_need_bytes): a requirement line (rented disks can be extended);
- wall clock: timing's steps, plus saves on the offer's disk and start-up by nodes (overheads.py), or on spot the
  expected time with restarts and lost work at the Young/Daly interval (interruptions.py).
Unknown host facts (null) stay unknown: the plan lists them as requirements to confirm (requirements.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optimizer.configs import Configs, Hardware, Job
from optimizer.models import interruptions, overheads, timing
from optimizer.schema import Term
from optimizer.schema_catalog import Gpu, Offer

MIB = 2**20
GIB = 2**30
ON_DEMAND, SPOT = 0, 1
CAPACITY = ("on_demand", "spot")  # code -> plan.capacity


def capacity_bytes(gpu: Gpu, offer: Offer) -> int:
    """Card memory a plan may fill: offer usable MiB, else the GPU's usable MiB, else nominal GiB (bytes)."""
    if offer.usable_memory_mib is not None:
        return int(offer.usable_memory_mib * MIB)
    if gpu.usable_memory_mib is not None:
        return int(gpu.usable_memory_mib * MIB)
    return int(gpu.memory_gib * GIB)


def p2p(gpu: Gpu, offer: Offer) -> bool:
    """Whether GPU peer-to-peer works on the offer's hosts: the offer's statement, else the GPU's default."""
    return gpu.p2p if offer.p2p is None else offer.p2p


def _nan_or(value: float | None, scale: float) -> float:
    return float("nan") if value is None else value * scale


def host_ram_bytes(offers: list[Offer], offer_idx: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Host RAM per node of each row, (n,) bytes; NaN where the offer states neither figure.

    The node's ``ram_gib``, or ``ram_gib_per_card`` x the cards rented in the node (``ranks``).
    """
    if not len(offers):
        return np.zeros(0)
    node = np.array([_nan_or(o.host.ram_gib if o.host else None, GIB) for o in offers])[offer_idx]
    card = np.array([_nan_or(o.host.ram_gib_per_card if o.host else None, GIB) for o in offers])[offer_idx]
    return np.where(np.isnan(node), card * ranks, node)


def local_disk_bytes(offers: list[Offer], offer_idx: np.ndarray) -> np.ndarray:
    """Local disk per node of each row's offer, (n,) bytes; NaN where not stated."""
    disk = np.array([_nan_or(o.host.local_disk_gb if o.host else None, 1e9) for o in offers])
    return disk[offer_idx] if len(offers) else np.zeros(0)


def disk_write_bytes_per_s(offers: list[Offer], offer_idx: np.ndarray, hosts: Mapping[str, Any]) -> np.ndarray:
    """Checkpoint write rate per node by the offer's disk kind (calibration ``hosts.disk_write_gb_per_s``), (n,)."""
    speeds = hosts["disk_write_gb_per_s"]
    rate = np.array([float(speeds[(o.host.local_disk_kind if o.host else None) or "unknown"]) * 1e9 for o in offers])
    return rate[offer_idx] if len(offers) else np.zeros(0)


def ranks_per_node(cards: np.ndarray, offers: list[Offer], offer_idx: np.ndarray) -> np.ndarray:
    """Training processes on one node: min(cards, cards_per_node), (n,)."""
    per_node = np.array([o.cards_per_node for o in offers])
    return np.minimum(cards, per_node[offer_idx]) if len(offers) else np.zeros(0, dtype=np.int64)


def host_ram_need(cpu_offload: np.ndarray, ranks: np.ndarray, hosts: Mapping[str, Any]) -> np.ndarray:
    """Host RAM per node a plan needs, (n,) bytes: offloaded states + host_ram_per_rank_gib x ranks."""
    return cpu_offload.astype(np.float64) + float(hosts["host_ram_per_rank_gib"]) * GIB * ranks


def ram_fits(need: np.ndarray, ram: np.ndarray) -> np.ndarray:
    """Rows whose stated host RAM suffices, (n,) bool; an unknown (NaN) figure does not exclude.

    Unknown RAM becomes a requirement line. Disks are not a constraint: rented disks can be extended, so their
    size is a requirement line too.
    """
    return np.isnan(ram) | (need <= ram)


def wall_clock(job: Job, cfg: Configs, hw: Hardware, offers: list[Offer], offer_idx: np.ndarray, nodes: np.ndarray,
               cal: Mapping[str, Any]) -> dict[str, np.ndarray]:  # fmt: skip
    """A configuration's time on its offer: the step-time model (timing.job_time) with the offer's overheads."""
    return with_overheads(job, cfg, timing.job_time(job, cfg, hw, cal["timing"]), offers, offer_idx, nodes, cal)


def with_overheads(job: Job, cfg: Configs, t: dict[str, np.ndarray], offers: list[Offer], offer_idx: np.ndarray,
                   nodes: np.ndarray, cal: Mapping[str, Any]) -> dict[str, np.ndarray]:  # fmt: skip
    """timing.job_time's dict with ``hours`` recomputed from the steps plus the offer's overheads (on demand).

    Adds ``train_seconds``, ``save_seconds`` (one save), ``startup_seconds``, ``checkpoint_bytes``,
    ``checkpoint_interval_hours``, ``interruption_hours`` (0) and ``deadline_margin_hours`` (0). Without a
    calibration ``hosts`` section the timing model's hours are kept.
    """
    hosts, timing = cal.get("hosts"), cal["timing"]
    out = dict(t)
    n = len(cfg)
    if not hosts:
        out.update(interruption_hours=np.zeros(n), deadline_margin_hours=np.zeros(n), spot_hours_low=t["hours"],
                   spot_hours_high=t["hours"],
                   checkpoint_interval_hours=np.full(n, float(job.checkpoint_every_hours or
                                                                timing["checkpoint_every_hours"])))  # fmt: skip
        return out
    train = job.steps * t["step_seconds"]
    ckpt = overheads.checkpoint_bytes(job, cfg, hosts)
    save = overheads.save_seconds(ckpt, nodes, disk_write_bytes_per_s(offers, offer_idx, hosts))
    start = overheads.startup_seconds(nodes, float(timing["startup_seconds"]),
                                      float(hosts["startup_seconds_per_node_doubling"]))  # fmt: skip
    every_h = float(job.checkpoint_every_hours or timing["checkpoint_every_hours"])
    hours = (train + overheads.saves_count(train, every_h) * save + start) / 3600.0
    out.update(hours=hours, train_seconds=train, save_seconds=save, startup_seconds=start, checkpoint_bytes=ckpt,
               checkpoint_interval_hours=np.full(n, every_h), interruption_hours=np.zeros(n),
               deadline_margin_hours=np.zeros(n), spot_hours_low=hours, spot_hours_high=hours)  # fmt: skip
    return out


def spot_time(t: dict[str, np.ndarray], nodes: np.ndarray, mtbi_low_h: np.ndarray, mtbi_high_h: np.ndarray,
              disk_bytes_per_s: np.ndarray) -> dict[str, np.ndarray]:  # fmt: skip
    """The same rows on spot capacity: expected hours with restarts and lost work (interruptions.py), (n,) each.

    The expected rate of interruptions is the mean of the band's rates, 1/M = (1/M_low + 1/M_high) / 2, and
    ``deadline_margin_hours`` is the pessimistic end (M_low) less the expected hours: the deadline is checked at
    hours + margin, so a plan meets it even with frequent
    interruptions. The restart reads the last checkpoint back at the disk's write rate (R = start-up + ckpt /
    nodes / disk). Needs ``with_overheads``' keys.
    """
    restart = t["startup_seconds"] + overheads.save_seconds(t["checkpoint_bytes"], nodes, disk_bytes_per_s)

    def run(mtbi_h: np.ndarray) -> dict[str, np.ndarray]:
        mtbi = interruptions.job_mtbi_s(mtbi_h, nodes)
        return interruptions.expected_seconds(t["train_seconds"], t["save_seconds"], restart, t["startup_seconds"],
                                              mtbi)  # fmt: skip

    mean = run(2.0 / (1.0 / mtbi_low_h + 1.0 / mtbi_high_h))
    low, high = run(mtbi_low_h), run(mtbi_high_h)
    out = dict(t)
    out.update(hours=mean["total"] / 3600.0, interruption_hours=mean["lost"] / 3600.0,
               checkpoint_interval_hours=mean["interval"] / 3600.0,
               deadline_margin_hours=(low["total"] - mean["total"]) / 3600.0,
               spot_hours_low=high["total"] / 3600.0, spot_hours_high=low["total"] / 3600.0)  # fmt: skip
    return out


def spot_offer(offer: Offer) -> Offer:
    """The offer as billed on spot capacity: its spot price as the only (hourly) term, same billing increment."""
    assert offer.spot is not None
    return offer.model_copy(update={"prices": {Term.hour: offer.spot.price}})


def spot_ready(offer: Offer) -> bool:
    """Whether the offer can be planned on spot: a spot price and an interruption band."""
    return offer.spot is not None and offer.spot.interruptions is not None


def add_spot_rows(cand: Any, offers: list[Offer], hosts_cal: Mapping[str, Any], pinned: str | None) -> Any:
    """The candidates plus a spot copy of each one whose offer is ``spot_ready`` (space.Evaluated in and out).

    ``pinned`` (the scenario's ``plan.capacity``) keeps only that capacity. Spot copies whose expected time is
    infinite (interrupted faster than they can restart) are dropped.
    """
    n = len(cand)
    ready = np.array([spot_ready(o) for o in offers], dtype=bool)
    idx = np.flatnonzero(ready[cand.offer_idx]) if n else np.zeros(0, dtype=np.int64)
    both = cand.take(np.concatenate([np.arange(n), idx]).astype(np.int64))
    if idx.size:
        both.capacity[n:] = SPOT
        band = np.array([[o.spot.interruptions.mtbi_hours_low, o.spot.interruptions.mtbi_hours_high]  # type: ignore[union-attr]
                         if spot_ready(o) else [np.nan, np.nan] for o in offers]).reshape(-1, 2)  # fmt: skip
        oi = both.offer_idx[n:]
        sub = spot_time({k: v[n:] for k, v in both.time.items()}, both.nodes[n:], band[oi, 0], band[oi, 1],
                        disk_write_bytes_per_s(offers, oi, hosts_cal))  # fmt: skip
        for key, values in sub.items():
            both.time[key][n:] = values
    keep = np.isfinite(both.time["hours"])
    if pinned is not None:
        keep &= both.capacity == CAPACITY.index(pinned)
    return both.take(keep)
