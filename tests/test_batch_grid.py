"""space.grid, vectorised for batch throughput, enumerates exactly what the plain loops enumerate, in order."""

from __future__ import annotations

import numpy as np
import pytest

from optimizer.catalog import resolve_model
from optimizer.configs import CHECKPOINTING, OFFLOAD
from optimizer.schema import Scenario
from optimizer.space import ZERO_OFFLOAD, _precisions, grid, layouts, make_job, pinned_offers

from .conftest import scenario_doc


def _loop_grid(scenario, job, lays, gpus):
    """The reference: the original list-of-tuples enumeration."""
    pins = scenario.plan
    zo = [
        (z, OFFLOAD.index(o))
        for z, o in ZERO_OFFLOAD
        if (pins.zero_stage is None or z == pins.zero_stage) and (pins.offload is None or o == pins.offload)
    ]
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
        for prec in _precisions(scenario, gpus[lay.offer]):
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
    job = make_job(sc, resolve_model(sc, catalog))
    offers = pinned_offers(sc, catalog, "test")
    gpus = [catalog.gpus[o.gpu] for o in offers]
    lays = layouts(sc, job, offers, gpus)
    got = np.column_stack(grid(sc, job, lays, gpus, offers)).reshape(-1, 6)
    want = _loop_grid(sc, job, lays, gpus)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
