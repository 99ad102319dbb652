"""Host facts and spot time checked against numbers worked out by hand (units and averaging, not shapes)."""

from __future__ import annotations

import numpy as np
import pytest

from optimizer.models import hosts
from optimizer.solve.planner import solve_scenario

from .conftest import scenario_doc
from .test_offers_hosts import SRC, offer, write, write_offers


def test_local_disk_gb_are_decimal_gigabytes_and_ram_gib_binary(tmp_path):
    # 500 GB of NVMe = 500 x 10^9 bytes; 96 GiB of RAM = 96 x 2^30 bytes (catalogs/README.md field units)
    host = {"ram_gib": 96, "local_disk_gb": 500, "local_disk_kind": "nvme", **SRC}
    path = write(tmp_path, scenario_doc(catalog=str(write_offers(tmp_path, [offer("d", "A100-80G", 1.0, host=host)]))))
    best = solve_scenario(path).best
    assert best.offer is not None
    assert best.offer.local_disk_bytes == 500_000_000_000
    assert best.offer.host_ram_bytes == 96 * 1_073_741_824


def test_spot_time_uses_the_band_mean_rate_not_the_mean_interval():
    # Band of 2 h to 8 h between interruptions on one node: mean rate (1/2 + 1/8) / 2 = 0.3125 per hour, so
    # M = 3.2 h (the mean interval, 5 h, would be wrong). W = 36,000 s of work, C = 60 s per save, start-up and
    # restart 300 s (no checkpoint to read back). Worked out by hand (interruptions.py formulas):
    #   M = 11,520 s: tau = sqrt(2 x 60 x 11,520) = 1,175.755 s; busy = 36,000 (1 + 60 / 1,175.755) + 300
    #   = 38,137.117 s; lost share = (300 + (1,175.755 + 60) / 2) / 11,520 = 0.079677; T = 41,438.834 s = 11.5108 h
    #   M = 7,200 s (the pessimistic end): T = 43,416.203 s = 12.0601 h, so the deadline margin is 0.5493 h;
    #   M = 28,800 s (the optimistic end): T = 39,175.149 s = 10.8820 h.
    t = {"train_seconds": np.array([36000.0]), "save_seconds": np.array([60.0]),
         "startup_seconds": np.array([300.0]), "checkpoint_bytes": np.array([0.0]), "hours": np.array([10.0])}
    out = hosts.spot_time(t, np.array([1]), np.array([2.0]), np.array([8.0]), np.array([1.0e9]))  # fmt: skip
    assert out["hours"][0] == pytest.approx(11.5108, abs=1e-4)
    assert out["checkpoint_interval_hours"][0] == pytest.approx(1175.755 / 3600, abs=1e-6)
    assert out["deadline_margin_hours"][0] == pytest.approx(12.0601 - 11.5108, abs=2e-4)
    assert (out["spot_hours_low"][0], out["spot_hours_high"][0]) == (pytest.approx(10.8820, abs=1e-4),
                                                                      pytest.approx(12.0601, abs=1e-4))  # fmt: skip
