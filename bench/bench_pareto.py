"""Pareto-front benchmark: median time of the exact cost/time front of every shipped scenario.

For each scenario: candidates after pruning, points on the front, CP-SAT solves (one per point, one that proves
no faster plan exists, one for the chosen plan) and the median seconds over repeated runs (catalogs warm).

    .venv/bin/python bench/bench_pareto.py --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from optimizer.solve.pareto import pareto_scenario

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help="default: scenarios/*.yaml")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    paths = [Path(p) for p in args.scenarios] or sorted((REPO / "scenarios").glob("*.yaml"))
    print(f"{'scenario':34s} {'cands':>6s} {'points':>6s} {'solves':>6s} {'median_s':>9s} {'per_solve_ms':>12s}")
    for path in paths:
        result = pareto_scenario(path)  # warm-up: catalogs, imports
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            result = pareto_scenario(path)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        print(f"{path.stem:34s} {result.candidates:6d} {len(result.estimates):6d} {result.solves:6d} {med:9.3f} "
              f"{1000 * med / max(result.solves, 1):12.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
