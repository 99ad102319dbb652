"""Leave-one-out accuracy of calibration overlays on the published cases (tests/data/reference).

For every measured case whose group (time: GPU architecture x engine x method x precision; memory: engine x method)
has at least one other case, fit an overlay on the other cases of that group only (``ftopt calibrate``'s fit,
default prior weight and cap), predict the held-out case through it, and compare |error| with the shipped model's.
This is what a user gets from measuring a few runs of their own stack before planning a new one. Band coverage:
the share of held-out cases whose real / calibrated-prediction ratio lies inside the overlay's p10-p90 band for the
group (about 80% when the band is honest); the shipped band's coverage of the shipped prediction is beside it.

    python bench/calibrate_holdout.py            # summary per model
    python bench/calibrate_holdout.py --cases    # and every case
    python bench/calibrate_holdout.py --check    # also: exit 1 where README.md quotes other figures (CI's figures
                                                 # tier); --write updates README.md
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import readme_figures  # noqa: E402
from optimizer.inputs.catalog import load_catalog  # noqa: E402
from optimizer.inputs.measurement import load_cases  # noqa: E402
from optimizer.measure.calibrate import calibrate, memory_pair, predict, time_pair  # noqa: E402

README_SENTENCE = re.compile(  # README.md's "What to expect" item of the calibration section
    r"goes from (?P<time_shipped>[\d.]+)% to (?P<time_calibrated>[\d.]+)% for time \((?P<time_n>\d+) cases\) and"
    r"\s+from\s+(?P<memory_shipped>[\d.]+)% to\s+(?P<memory_calibrated>[\d.]+)% for memory \((?P<memory_n>\d+)"
    r"\s+cases\).*?The calibrated bands hold (?P<time_band_calibrated>\d+)% \(time\) and"
    r"\s+(?P<memory_band_calibrated>\d+)%\s+\(memory\) of those cases between their 10th and 90th percentiles,"
    r"\s+the\s+shipped\s+bands\s+(?P<time_band_shipped>\d+)% and\s+(?P<memory_band_shipped>\d+)%", re.S)
FILES = {"time": REPO / "tests/data/reference/throughput_cases.yaml",
         "memory": REPO / "tests/data/reference/memory_cases.yaml"}  # fmt: skip


def rows(model: str, tmp: Path) -> list[tuple[str, float, float, bool, bool]]:
    """Per case with a group mate: id, |error| shipped and calibrated on the rest of its group, and whether the
    shipped and the calibrated bands hold the real / predicted ratio."""
    pair = time_pair if model == "time" else memory_pair
    cases = load_cases(FILES[model])
    groups: dict[tuple, list] = defaultdict(list)
    for case in cases:
        pred = predict(case, tmp)
        measured, predicted, _ = pair(case, pred)
        if measured is not None:
            groups[pred.time_key if model == "time" else pred.memory_key].append((case, measured, predicted))
    shipped = load_catalog().calibration["accuracy"]
    out = []
    for members in groups.values():
        for i, (case, measured, before) in enumerate(members):
            rest = [c.model_dump(mode="json", exclude_none=True) for j, (c, _, _) in enumerate(members) if j != i]
            if not rest:
                continue
            fit = tmp / "rest.yaml"
            fit.write_text(yaml.safe_dump({"cases": rest}, sort_keys=False))
            result = calibrate([str(fit)], output=tmp / "cal.yaml")
            after = pair(case, predict(case, tmp, tmp / "cal.yaml"))[1]
            (group,) = result.overlay.time if model == "time" else result.overlay.memory
            out.append((case.id, abs(before / measured - 1), abs(after / measured - 1),
                        _inside(shipped[model], _real(model, measured, before)),
                        _inside(group.band.model_dump(), _real(model, measured, after))))  # fmt: skip
    return out


def _real(model: str, measured: float, predicted: float) -> float:
    """real / predicted: step time (predicted / measured tokens/s) or peak memory (measured / predicted)."""
    return predicted / measured if model == "time" else measured / predicted


def _inside(band: dict, ratio: float) -> bool:
    return float(band["ratio_p10"]) <= ratio <= float(band["ratio_p90"])


def main(argv: list[str] | None = None) -> None:
    """Print the summary per model (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", action="store_true", help="print every held-out case")
    readme_figures.add_arguments(parser)
    args = parser.parse_args(argv)
    quoted: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        for model in ("time", "memory"):
            found = rows(model, Path(tmp_name))
            if args.cases:
                for cid, before, after, _, _ in found:
                    print(f"{model:6} {cid:55} shipped {before:6.1%}  calibrated {after:6.1%}")
            better = sum(r[2] < r[1] for r in found)
            figs = {"n": str(len(found)), "shipped": f"{statistics.median(r[1] for r in found) * 100:.1f}",
                    "calibrated": f"{statistics.median(r[2] for r in found) * 100:.1f}",
                    "band_shipped": f"{sum(r[3] for r in found) / len(found) * 100:.0f}",
                    "band_calibrated": f"{sum(r[4] for r in found) / len(found) * 100:.0f}"}  # fmt: skip
            quoted |= {f"{model}_{k}": v for k, v in figs.items()}
            print(f"{model}: {figs['n']} held-out cases; median |error| shipped {figs['shipped']}%, calibrated on "
                  f"the rest of the group {figs['calibrated']}%; better on {better}, worse on "
                  f"{sum(r[2] > r[1] for r in found)}; inside the p10-p90 band: shipped {figs['band_shipped']}%, "
                  f"calibrated {figs['band_calibrated']}%")  # fmt: skip
    if args.check or args.write:
        stale = readme_figures.sync(REPO / "README.md", README_SENTENCE, quoted, args.write)
        readme_figures.conclude(stale, args.check, args.write)


if __name__ == "__main__":
    main()
