"""The JSON contract's ``offer`` and ``spot`` blocks of a plan: the rented machine as stated, and the spot spread."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from optimizer.inputs.schema_plan import OfferReport, SpotReport
from optimizer.models import cost, hosts
from optimizer.solve.context import price_basis

MIB = 2**20


def offer_report(space: Any, i: int, billed_units: dict[str, int]) -> OfferReport:
    """Candidate ``i``'s offer as the catalog states it: provider, the source of each price billed, and the machine.

    The prices are those the bill uses: on spot capacity the offer's spot price (its source and date), not the
    on-demand list.

    Host RAM for the plan's cards in a node, vCPUs, disk, usable memory per card (the offer's or the GPU's figure;
    null when only the nominal size is known), P2P as the offer states it, and the host facts' source.
    """
    c = space.cand
    oi = int(c.offer_idx[i])
    offer, gpu = space.offers[oi], space.gpus[oi]
    idx = c.offer_idx[i : i + 1]
    override = space.scenario.allow.max_host_memory_gib
    ranks = hosts.ranks_per_node(c.cards[i : i + 1], space.offers, idx)
    ram = float(hosts.host_ram_bytes(space.offers, idx, ranks, space.hosts_cal, override)[0])
    disk = float(hosts.local_disk_bytes(space.offers, idx)[0])
    usable = offer.usable_memory_mib if offer.usable_memory_mib is not None else gpu.usable_memory_mib
    host = offer.host
    billed = hosts.spot_offer(offer) if int(c.capacity[i]) == hosts.SPOT else offer  # the price the bill uses
    return OfferReport(
        id=offer.id,
        provider=offer.provider,
        currency=offer.currency,
        prices=price_basis(billed, billed_units),
        notes=offer.notes,
        sold_as=offer.sold_as,
        cards_per_instance=offer.cards_per_instance,
        host_ram_bytes=None if math.isnan(ram) else int(ram),
        host_ram_rule=hosts.ram_rule_text(offer, space.hosts_cal, override) if space.hosts_cal else None,
        vcpus=host.vcpus if host else None,
        local_disk_bytes=None if math.isnan(disk) else int(disk),
        usable_bytes_per_card=None if usable is None else int(usable * MIB),
        p2p=offer.p2p,
        source=host.source if host else None,
    )


def spot_report(space: Any, i: int) -> SpotReport | None:
    """For a spot plan: its price, interruption band, checkpoint interval and time/bill at both band ends."""
    c = space.cand
    if int(c.capacity[i]) != hosts.SPOT:
        return None
    offer = space.offers[int(c.offer_idx[i])]
    band = hosts.spot_band(offer, space.hosts_cal)
    assert offer.spot is not None and band is not None
    low, high = float(c.time["spot_hours_low"][i]), float(c.time["spot_hours_high"][i])
    bills = cost.bills(np.array([low, high]), hosts.spot_offer(offer), space.scenario.billing_terms)
    cards = int(c.cards[i])
    return SpotReport(
        price_per_card_hour=offer.spot.price.amount,
        currency=offer.currency,
        mtbi_hours_low=band[0],
        mtbi_hours_high=band[1],
        assumption=band[2],
        checkpoint_interval_hours=round(float(c.time["checkpoint_interval_hours"][i]), 6),
        hours_low=round(low, 6),
        hours_high=round(high, 6),
        cost_low=round(bills[0].per_card * cards, 2),
        cost_high=round(bills[1].per_card * cards, 2),
    )
