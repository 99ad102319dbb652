"""What the user must confirm with the provider before renting a plan's machines: one line per unknown or tight fact.

Each line names the offer, the figure the plan needs and where it comes from. A fact the offer states and the plan
satisfies gives no line; a fact the offer does not state (null in the catalog) always does.
"""

from __future__ import annotations

from typing import Any

from optimizer.inputs.schema import Offload
from optimizer.inputs.schema_catalog import Gpu, Offer
from optimizer.models import hosts, overheads
from optimizer.models.configs import OFFLOAD

GIB = 2**30


def _gib(n: float) -> str:
    return f"{n / GIB:,.0f} GiB"


def host_ram_line(offer: Offer, need: float, offload: float, ranks: int, have: float,
                  rule: str | None = None, what: str = "optimizer states") -> str | None:  # fmt: skip
    """Host RAM per node: a line when the offer does not state it (the plan fits the assumed figure ``have``).

    ``what``: what is offloaded (optimizer states; parameters and optimizer states for ``offload: all``).
    """
    if hosts.ram_stated(offer):  # stated: the space already dropped plans that need more
        return None
    parts = f"{_gib(offload)} of offloaded {what} + " if offload > 0 else ""
    assumed = f"; planned with {_gib(have)} per node: {rule}" if rule and have == have else ""
    return (f"host RAM: confirm with {offer.provider} that each node of {offer.id} has at least {_gib(need)} of RAM "
            f"({parts}{ranks} training process{'es' if ranks != 1 else ''}); the offer does not state it"
            f"{assumed}")  # fmt: skip


def usable_memory_line(gpu: Gpu, offer: Offer, capacity_bytes: int) -> str | None:
    """Usable card memory: a line when only the nominal size is known."""
    if offer.usable_memory_mib is not None or gpu.usable_memory_mib is not None:
        return None
    return (f"GPU memory: confirm that nvidia-smi on {offer.id} reports {capacity_bytes / 2**20:,.0f} MiB per card; "
            f"the plan used the nominal {gpu.memory_gib:g} GiB, and a smaller usable size may not fit")  # fmt: skip


def p2p_line(gpu: Gpu, offer: Offer, ranks: int) -> str | None:
    """Peer-to-peer: a line when several cards share a node and the offer does not say whether P2P works."""
    over_nvlink = offer.nvlink and gpu.nvlink_gb_per_s > 0 and ranks <= gpu.nvlink_domain
    if ranks < 2 or offer.p2p is not None or over_nvlink:
        return None
    planned = "with" if gpu.p2p else "without"
    return (f"P2P: confirm whether GPU peer-to-peer works between the cards of {offer.id} (nvidia-smi topo -p2p r); "
            f"the plan assumed {planned} P2P ({gpu.id} default); the other case changes collective time")  # fmt: skip


def nvlink_line(gpu: Gpu, offer: Offer, ranks: int) -> str | None:
    """NVLink: a line when several cards share a node and the offer does not say whether they are linked (null)."""
    if ranks < 2 or offer.nvlink is not None or gpu.nvlink_gb_per_s <= 0:
        return None
    return (f"NVLink: confirm whether the cards of {offer.id} are SXM boards on NVLink or PCIe cards (nvidia-smi "
            f"topo -m shows NV# between them); the offer does not say, so the plan assumed PCIe; on NVLink its "
            f"collectives are faster: set nvlink: true on the offer and re-plan")  # fmt: skip


def disk_line(offer: Offer, need: float, kept: int) -> str:
    """Local disk per node: always a line (size needed, and what the offer states)."""
    stated = offer.host.local_disk_gb if offer.host else None
    what = f"{need / 1e9:,.0f} GB of local disk per node (the model + {kept} checkpoints; plus the dataset)"
    if stated is None:
        return f"disk: confirm {what} on {offer.id}; the offer does not state its disk"
    if need > stated * 1e9:
        return f"disk: extend the disk of {offer.id} to {what}; the offer states {stated:,.0f} GB"
    return f"disk: {what} fits the {stated:,.0f} GB the offer states"


def spot_lines(offer: Offer, capacity: int, interval_h: float, spot_allowed: bool,
               hosts_cal: dict | None = None) -> list[str]:  # fmt: skip
    """Spot: how the job must run when on spot; why an offer with a spot price was not planned on spot."""
    if capacity == hosts.SPOT:
        band = hosts.spot_band(offer, hosts_cal)
        prior = ([f"spot: {offer.id} publishes no interruption rate; the plan ASSUMES {band[0]:g}-{band[1]:g} h "
                  f"between interruptions per node ({band[2]})"] if band and band[2] else [])  # fmt: skip
        return [f"spot: the job must save a resumable checkpoint every {interval_h:.2f} h of training and restart "
                f"from it automatically after an interruption; confirm {offer.provider} allows restarting on "
                "the same kind of capacity", *prior]  # fmt: skip
    if spot_allowed and offer.spot is not None and not hosts.spot_ready(offer, hosts_cal):
        return [f"spot: {offer.id} has a spot price but no interruption rate in the catalog; add spot.interruptions "
                "(mean hours between interruptions, low and high) to let ftopt weigh it"]  # fmt: skip
    return []


def for_row(space: Any, i: int) -> list[str]:
    """Requirement lines for candidate ``i`` of a space.Space (needs the calibration ``hosts`` section)."""
    c = space.cand
    oi = int(c.offer_idx[i])
    offer, gpu = space.offers[oi], space.gpus[oi]
    cal = space.hosts_cal
    if not cal:
        return []
    idx = c.offer_idx[i : i + 1]
    ranks = hosts.ranks_per_node(c.cards[i : i + 1], space.offers, idx)
    offload = float(c.mem["cpu_offload"][i])
    need = float(hosts.host_ram_need(c.mem["cpu_offload"][i : i + 1], ranks, cal)[0])
    override = space.scenario.allow.max_host_memory_gib
    have = float(hosts.host_ram_bytes(space.offers, idx, ranks, cal, override)[0])
    disk_need = float(overheads.disk_need_bytes(space.job, c.time["checkpoint_bytes"][i : i + 1],
                                                c.nodes[i : i + 1], int(cal["checkpoints_kept"]))[0])  # fmt: skip
    lines = [
        host_ram_line(offer, need, offload, int(ranks[0]), have, hosts.ram_rule_text(offer, cal, override),
                      "parameters and optimizer states" if int(c.cfg.offload[i]) == OFFLOAD.index(Offload.all)
                      else "optimizer states"),  # fmt: skip
        usable_memory_line(gpu, offer, int(c.hw.capacity_bytes[i])),
        nvlink_line(gpu, offer, int(ranks[0])),
        p2p_line(gpu, offer, int(ranks[0])),
        disk_line(offer, disk_need, int(cal["checkpoints_kept"])),
    ]
    lines += spot_lines(offer, int(c.capacity[i]), float(c.time["checkpoint_interval_hours"][i]),
                        space.scenario.allow.spot, cal)  # fmt: skip
    return [line for line in lines if line]
