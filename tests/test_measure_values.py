"""Units of a measurement: GB are 10^9 bytes, GiB 2^30 (optimizer/inputs/measurement.py), through to the calibration
rows."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from optimizer.inputs.measurement import Measured, load_cases
from optimizer.measure.calibrate import calibrate
from tests.conftest import REFERENCE


@pytest.mark.parametrize(("unit", "bytes_"), [("GB", 20_000_000_000), ("GiB", 21_474_836_480)])
def test_a_peak_is_converted_by_its_unit(unit, bytes_):
    assert Measured(peak=20.0, unit=unit, metric="allocated").peak_bytes() == bytes_


def test_a_peak_in_gb_reaches_the_calibration_row_as_decimal_bytes(tmp_path: Path):
    case = next(c for c in load_cases(REFERENCE / "memory_cases.yaml") if c.measured.unit == "GiB"
                and c.measured.metric == "allocated")  # fmt: skip
    gib = case.measured.peak
    # the same peak restated in GB (x 2^30 / 10^9), so the bytes, the factor and the row must not change
    restated = {"gib": Measured(peak=gib, unit="GiB", metric="allocated"),
                "gb": Measured(peak=gib * 2**30 / 1e9, unit="GB", metric="allocated")}  # fmt: skip
    rows = {}
    for name, measured in restated.items():
        c = case.model_copy(update={"measured": measured})
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"cases": [c.model_dump(mode="json", exclude_none=True)]}, sort_keys=False))
        (rows[name],) = [r for r in calibrate([str(path)]).rows if r.model == "memory"]
    assert rows["gib"].measured == pytest.approx(gib * 2**30, rel=1e-9)
    assert rows["gb"].measured == pytest.approx(gib * 2**30, rel=1e-9)
