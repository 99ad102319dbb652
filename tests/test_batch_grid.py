"""space.layouts and space.grid (vectorised for batch throughput) enumerate exactly what plain loops written from
docs/design.md section 4 enumerate, in order. The reference shares no code with space.py: its card counts, tp choices,
ZeRO/offload pairs and precision rule are written out here."""

from __future__ import annotations

import numpy as np
import pytest

from optimizer.inputs.catalog import resolve_model
from optimizer.inputs.schema import Offload, Precision, Scenario
from optimizer.models.configs import CHECKPOINTING, OFFLOAD, PRECISION
from optimizer.solve.space import grid, layouts, make_job, pinned_offers

from .conftest import scenario_doc

# ZeRO stage and offload pairs an engine can run (docs/design.md section 4: offload none | optimizer | all; optimizer
# offload needs a partitioned optimizer, stage >= 1; parameter offload needs partitioned parameters, stage 3)
PAIRS = [(z, o) for z in range(4) for o in (Offload.none, Offload.optimizer, Offload.all)
         if o is Offload.none or (o is Offload.optimizer and z >= 1) or (o is Offload.all and z == 3)]  # fmt: skip


def _loop_layouts(scenario, arch, offers, gpus):
    """(offer, cards, nodes, tp, pp, dp) by plain loops: cards 1, 2, 4, ... up to a node, a full node, then 2, 4, 8...
    nodes and the offer's maximum; tp in 1, 2, 4, 8 within the NVLink domain, dividing heads, kv heads and cards."""
    pins = scenario.plan
    out = []
    for i, (offer, gpu) in enumerate(zip(offers, gpus, strict=True)):
        per_node = offer.cards_per_node
        counts = {c for c in (1, 2, 4, 8, 16, 32, 64) if c <= per_node} | {per_node, per_node * offer.max_nodes}
        nodes = 2
        while nodes <= offer.max_nodes:
            counts.add(per_node * nodes)
            nodes *= 2
        domain = min(gpu.nvlink_domain, per_node) if offer.nvlink and gpu.nvlink_gb_per_s > 0 else 1
        pp = pins.pp or 1
        whole = offer.cards_per_instance if offer.sold_as == "instance" else 1  # instance offers: whole machines
        for cards in [pins.cards] if pins.cards is not None else sorted(counts):
            if cards % whole:
                continue
            n_nodes = -(-cards // per_node)
            if n_nodes > offer.max_nodes or (pins.nodes is not None and pins.nodes != n_nodes):
                continue
            for tp in [pins.tp] if pins.tp is not None else [1, 2, 4, 8]:
                if tp > domain or arch.heads % tp or arch.kv_heads % tp or cards % (tp * pp):
                    continue
                if pins.dp is not None and pins.dp != cards // (tp * pp):
                    continue
                out.append((i, cards, n_nodes, tp, pp, cards // (tp * pp)))
    return out


def _loop_grid(scenario, job, lays, gpus):
    """The reference rows (layout index, zero, offload, micro-batch, checkpointing, precision)."""
    pins = scenario.plan
    zo = [(z, OFFLOAD.index(o)) for z, o in PAIRS
          if pins.zero_stage in (None, z) and pins.offload in (None, o)]  # fmt: skip
    if pins.zero_stage is not None and pins.offload is not None and not zo:
        zo = [(pins.zero_stage, OFFLOAD.index(pins.offload))]
    cks = [CHECKPOINTING.index(pins.checkpointing)] if pins.checkpointing else list(range(len(CHECKPOINTING)))
    rows = []
    for li, lay in enumerate(lays):
        if job.global_batch % lay.dp:
            continue
        per_rank = job.global_batch // lay.dp
        if pins.micro_batch is not None:
            mbs = [pins.micro_batch] if per_rank % pins.micro_batch == 0 else []
        else:
            mbs = [m for m in (1, 2, 4, 8, 16, 32, 64) if per_rank % m == 0]
        if pins.grad_accum is not None:
            mbs = [m for m in mbs if per_rank // m == pins.grad_accum]
        gpu = gpus[lay.offer]
        if pins.precision is not None:  # the pinned precision where the GPU runs it
            precs = [PRECISION.index(pins.precision)] if gpu.peak_tflops(pins.precision) else []
        elif gpu.native_bf16:
            precs = [PRECISION.index(Precision.bf16)]
        elif job.arch.torch_dtype == "bfloat16" and not scenario.allow.fp16_for_bf16:
            precs = []  # a bf16-published model is not trained in fp16 unless allowed (docs/precision.md)
        else:  # fp16 on a GPU without native bf16 (grid's default fallback)
            precs = [PRECISION.index(Precision.fp16)]
        for prec in precs:
            rows.extend((li, z, o, m, ck, prec) for z, o in zo for m in mbs for ck in cks)
    return np.array(rows, dtype=np.int64).reshape(-1, 6)


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"global_batch": 48, "plan": {"micro_batch": 2}},
        {"plan": {"zero_stage": 3, "offload": "all", "checkpointing": "full"}},
        {"plan": {"zero_stage": 0, "offload": "all"}},  # a pair outside ZERO_OFFLOAD
        {"plan": {"grad_accum": 4, "precision": "fp8"}},
        {"plan": {"gpu": "RTX-4090", "micro_batch": 3}},  # no micro-batch divides: empty grid
    ],
    ids=["free", "micro-batch", "zero3-offload", "odd-pair", "grad-accum-fp8", "empty"],
)
def test_vectorised_grid_equals_the_loops(catalog, changes):
    sc = Scenario.model_validate(scenario_doc(**changes))
    job = make_job(sc, resolve_model(sc, catalog), catalog.calibration)
    offers = pinned_offers(sc, catalog, "test")
    gpus = [catalog.gpus[o.gpu] for o in offers]
    lays = layouts(sc, job, offers, gpus)
    assert [(x.offer, x.cards, x.nodes, x.tp, x.pp, x.dp) for x in lays] == _loop_layouts(sc, job.arch, offers, gpus)
    got = np.column_stack(grid(sc, job, lays, gpus, offers)).reshape(-1, 6)
    want = _loop_grid(sc, job, lays, gpus)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
