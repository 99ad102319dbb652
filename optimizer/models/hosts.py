"""What the rented machine adds to a plan: usable card memory, peer-to-peer, host RAM, disk, start-up, spot.

The offer's host facts (catalogs/offers ``host``, ``usable_memory_mib``, ``p2p``, ``spot``) become per-row arrays
here, for space.py (every candidate) and validator.py (one plan) alike:

- capacity: the memory a process sees, the offer's ``usable_memory_mib``, else the GPU's, else ``memory_gib``;
- P2P: the offer's ``p2p``, else the GPU's;
- host RAM need per node: offloaded states (memory.cpu_offload) + ``hosts.host_ram_per_rank_gib`` x ranks in the
  node; a plan needing more than the node's host RAM does not fit. The node's RAM is the offer's (``host.ram_gib``,
  or ``ram_gib_per_card`` x cards in the node); where the offer states neither, the scenario's
  ``allow.max_host_memory_gib`` (RAM offloading may use) + the ranks' own RAM, else the default rule of the
  calibration (``hosts.host_ram_default``: GiB per rented card by provider, else a fallback; each with its
  source), x cards in the node. Unknown RAM is never unlimited;
- disk need per node (overheads.disk_need_bytes): a requirement line (rented disks can be extended);
- wall clock: timing's steps, plus saves on the offer's disk and start-up by nodes (overheads.py), or on spot the
  expected time with restarts and lost work at the Young/Daly interval (interruptions.py).
- spot: the offer's interruption band, else the calibration's prior (``hosts.spot_prior``: a wide band per
  provider, else a fallback), reported as an assumption.
Unknown host facts (null) stay unknown: the plan lists them as requirements to confirm (requirements.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optimizer.inputs.schema import Term
from optimizer.inputs.schema_catalog import Gpu, Offer
from optimizer.models import interruptions, overheads, timing
from optimizer.models.configs import Configs, Hardware, Job

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


def _match(provider: str, entries: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The first entry whose ``match`` occurs in the provider's name (case-insensitive)."""
    return next((e for e in entries if str(e["match"]).lower() in provider.lower()), None)


def ram_stated(offer: Offer) -> bool:
    """Whether the offer states its host RAM (per node or per rented card)."""
    return offer.host is not None and (offer.host.ram_gib is not None or offer.host.ram_gib_per_card is not None)


def default_ram_rule(offer: Offer, hosts: Mapping[str, Any]) -> tuple[float, str] | None:
    """(GiB per rented card, source) of the calibration's default rule for an offer; None without a rule.

    The first ``hosts.host_ram_default.providers`` entry matching the offer's provider, else the fallback.
    """
    rule = hosts.get("host_ram_default") if hosts else None
    if not rule:
        return None
    found = _match(offer.provider, rule.get("providers", []))
    if found is not None:
        return float(found["gib_per_card"]), str(found["source"])
    return float(rule["fallback_gib_per_card"]), str(rule["fallback_source"])


def ram_rule_text(offer: Offer, hosts: Mapping[str, Any], override_gib: float | None) -> str | None:
    """How the RAM of an offer that does not state it was set (None when the offer states it)."""
    if ram_stated(offer):
        return None
    if override_gib is not None:
        per_rank = float(hosts["host_ram_per_rank_gib"])
        return (f"allow.max_host_memory_gib {override_gib:g} GiB for offloading + {per_rank:g} GiB per training "
                "process (the scenario's figure)")  # fmt: skip
    rule = default_ram_rule(offer, hosts)
    return None if rule is None else f"default {rule[0]:g} GiB per card ({rule[1]})"


def host_ram_bytes(offers: list[Offer], offer_idx: np.ndarray, ranks: np.ndarray,
                   hosts: Mapping[str, Any] | None = None, override_gib: float | None = None,
                   ) -> np.ndarray:  # fmt: skip
    """Host RAM per node of each row, (n,) bytes.

    The node's ``ram_gib``, or ``ram_gib_per_card`` x the cards rented in the node (``ranks``). Where the offer
    states neither: ``override_gib`` (the scenario's allow.max_host_memory_gib) + host_ram_per_rank_gib x ranks,
    else the calibration's default GiB per card x ranks (:func:`default_ram_rule`); NaN only without ``hosts``.
    """
    if not len(offers):
        return np.zeros(0)
    used, offer_idx = np.unique(offer_idx, return_inverse=True)  # the rules of the offers the rows use only
    offers = [offers[int(i)] for i in used]
    offer_idx = offer_idx.reshape(-1)
    node = np.array([_nan_or(o.host.ram_gib if o.host else None, GIB) for o in offers])[offer_idx]
    card = np.array([_nan_or(o.host.ram_gib_per_card if o.host else None, GIB) for o in offers])[offer_idx]
    ram = np.where(np.isnan(node), card * ranks, node)
    if not hosts:
        return ram
    if override_gib is not None:
        assumed = override_gib * GIB + float(hosts["host_ram_per_rank_gib"]) * GIB * ranks
    else:
        rules = [default_ram_rule(o, hosts) for o in offers]
        per_card = np.array([np.nan if r is None else r[0] * GIB for r in rules])[offer_idx]
        assumed = per_card * ranks
    return np.where(np.isnan(ram), assumed, ram)


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
    """Rows whose host RAM (stated or by the default rule, :func:`host_ram_bytes`) suffices, (n,) bool.

    NaN (no calibration rule at all) does not exclude. Disks are not a constraint: rented disks can be extended,
    so their size is a requirement line.
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
    ``checkpoint_saves``, ``checkpoint_interval_hours`` (the scenario's, else Young/Daly for on-demand hardware
    failures: overheads.py), ``interruption_hours`` (expected time lost to those failures) and
    ``deadline_margin_hours`` (0). Without a calibration ``hosts`` section the timing model's hours are kept.
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
    disk = disk_write_bytes_per_s(offers, offer_idx, hosts)
    save = overheads.save_seconds(ckpt, nodes, disk)
    start = overheads.startup_seconds(nodes, float(timing["startup_seconds"]),
                                      float(hosts["startup_seconds_per_node_doubling"]))  # fmt: skip
    start = start + overheads.model_write_seconds(job, disk)  # the model on each node's disk (grows with P)
    mtbi = interruptions.job_mtbi_s(np.full(n, float(hosts["on_demand_gpu_mtbi_hours"])), cfg.cards)
    if job.checkpoint_every_hours:
        interval = np.full(n, float(job.checkpoint_every_hours) * 3600.0)
    else:  # the interval that minimises saves + expected lost work (Young/Daly), as on spot
        interval = interruptions.young_daly_interval_s(save, mtbi)
    saves = np.minimum(overheads.saves_count(train, interval / 3600.0), float(job.steps))  # a save ends a step
    lost = overheads.failure_seconds(train, mtbi, start + save, interval)
    hours = (train + saves * save + start + lost) / 3600.0
    out.update(hours=hours, train_seconds=train, save_seconds=save, startup_seconds=start, checkpoint_bytes=ckpt,
               checkpoint_saves=saves, checkpoint_interval_hours=interval / 3600.0, interruption_hours=lost / 3600.0,
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
    saves = np.round(t["train_seconds"] / mean["interval"])  # expected_seconds' busy time counts work / tau saves
    out.update(hours=mean["total"] / 3600.0, interruption_hours=mean["lost"] / 3600.0,
               checkpoint_interval_hours=mean["interval"] / 3600.0,
               checkpoint_saves=np.clip(saves, 1.0, _steps(t)),
               deadline_margin_hours=(low["total"] - mean["total"]) / 3600.0,
               spot_hours_low=high["total"] / 3600.0, spot_hours_high=low["total"] / 3600.0)  # fmt: skip
    return out


def _steps(t: Mapping[str, np.ndarray]) -> np.ndarray | float:
    """The optimizer steps of each row (train / step seconds): no more saves than steps; inf without a step time."""
    if "step_seconds" not in t:
        return np.inf
    return np.rint(t["train_seconds"] / t["step_seconds"])


def spot_offer(offer: Offer) -> Offer:
    """The offer as billed on spot capacity: its spot price as the only (hourly) term, same billing increment."""
    assert offer.spot is not None
    return offer.model_copy(update={"prices": {Term.hour: offer.spot.price}})


def spot_band(offer: Offer, hosts: Mapping[str, Any] | None) -> tuple[float, float, str | None] | None:
    """(mtbi_hours_low, mtbi_hours_high, assumption) of an offer's spot capacity; None when it has none.

    The offer's ``spot.interruptions`` (assumption None), else the calibration prior ``hosts.spot_prior``: the
    first provider entry matching the offer's provider, else its fallback; the third item then names the prior and
    its source, so that the plan can say the band is assumed.
    """
    if offer.spot is None:
        return None
    band = offer.spot.interruptions
    if band is not None:
        return band.mtbi_hours_low, band.mtbi_hours_high, None
    prior = hosts.get("spot_prior") if hosts else None
    if not prior:
        return None
    entry = _match(offer.provider, prior.get("providers", [])) or prior["fallback"]
    label = f"assumed prior for {entry.get('match', 'providers without one')}: {entry['source']}"
    return float(entry["mtbi_hours_low"]), float(entry["mtbi_hours_high"]), label


def spot_ready(offer: Offer, hosts: Mapping[str, Any] | None = None) -> bool:
    """Whether the offer can be planned on spot: a spot price and an interruption band (stated, or the prior)."""
    return spot_band(offer, hosts) is not None


def add_spot_rows(cand: Any, offers: list[Offer], hosts_cal: Mapping[str, Any], pinned: str | None) -> Any:
    """The candidates plus a spot copy of each one whose offer is ``spot_ready`` (space.Evaluated in and out).

    ``pinned`` (the scenario's ``plan.capacity``) keeps only that capacity. Spot copies whose expected time is
    infinite (interrupted faster than they can restart) are dropped.
    """
    n = len(cand)
    ready = np.array([spot_ready(o, hosts_cal) for o in offers], dtype=bool)
    idx = np.flatnonzero(ready[cand.offer_idx]) if n else np.zeros(0, dtype=np.int64)
    both = cand.take(np.concatenate([np.arange(n), idx]).astype(np.int64))
    if idx.size:
        both.capacity[n:] = SPOT
        bands = [spot_band(o, hosts_cal) for o in offers]
        band = np.array([[b[0], b[1]] if b else [np.nan, np.nan] for b in bands]).reshape(-1, 2)
        oi = both.offer_idx[n:]
        sub = spot_time({k: v[n:] for k, v in both.time.items()}, both.nodes[n:], band[oi, 0], band[oi, 1],
                        disk_write_bytes_per_s(offers, oi, hosts_cal))  # fmt: skip
        for key, values in sub.items():
            both.time[key][n:] = values
    keep = np.isfinite(both.time["hours"])
    if pinned is not None:
        keep &= both.capacity == CAPACITY.index(pinned)
    return both.take(keep)
