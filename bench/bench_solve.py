"""Solve latency benchmark: ``ftopt solve scenarios/70b.yaml`` end to end against a bare ``import
optimizer.cli.commands``.

Both are timed as fresh subprocesses (interpreter start, imports, catalog parsing, enumeration, CP-SAT, rendering),
interleaved in the same run so that machine load affects both alike; medians over ``--runs`` (default 5).
Targets (issue 2): solve median <= 1 s on 2 cores, and <= 1.5 x the bare import median.

    .venv/bin/python bench/bench_solve.py
    .venv/bin/python bench/bench_solve.py --runs 9 --json scenarios/7b-lora.yaml
    .venv/bin/python bench/bench_solve.py --profile    # also: where the time goes (import tree and cProfile)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 1.0
TARGET_RATIO = 1.5


def _ftopt() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m optimizer.cli.commands``."""
    script = Path(sys.executable).parent / "ftopt"
    if script.exists():
        return [str(script)]
    found = shutil.which("ftopt")
    return [found] if found else [sys.executable, "-m", "optimizer.cli.commands"]


def _timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return elapsed


def measure(scenario: str, runs: int, as_json: bool) -> dict[str, float]:
    """Median seconds of the solve and of the bare import, interleaved, after one warm-up of each."""
    solve_cmd = [*_ftopt(), "solve", scenario, *(["--json"] if as_json else [])]
    import_cmd = [sys.executable, "-c", "import optimizer.cli.commands"]
    _timed(import_cmd), _timed(solve_cmd)  # warm the file cache and the .pyc files
    solve_s, import_s = [], []
    for _ in range(runs):
        import_s.append(_timed(import_cmd))
        solve_s.append(_timed(solve_cmd))
    solve_med, import_med = statistics.median(solve_s), statistics.median(import_s)
    return {"solve_median_s": solve_med, "import_median_s": import_med, "ratio": solve_med / import_med,
            "solve_min_s": min(solve_s), "import_min_s": min(import_s), "runs": runs}  # fmt: skip


def profile(scenario: str) -> None:
    """Print the slowest imports (``python -X importtime``) and the top of a cProfile of the solve."""
    imp = subprocess.run([sys.executable, "-X", "importtime", "-c", "import optimizer.cli.commands"], cwd=REPO,
                         capture_output=True, text=True)  # fmt: skip
    rows = []
    for line in imp.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    print("slowest imports (cumulative us, module):")
    for us, name in sorted(rows, reverse=True)[:15]:
        print(f"  {us:>9,d} {name}")
    cmd = [sys.executable, "-m", "cProfile", "-s", "cumulative", "-m", "optimizer.cli.commands", "solve", scenario]
    prof = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    lines = prof.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if "function calls" in line), 0)
    print("\ncProfile of the whole solve (imports included), top by cumulative time:")
    print("\n".join(lines[start : start + 40]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="scenarios/70b.yaml")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each command (median reported)")
    parser.add_argument("--json", action="store_true", help="time `solve --json` instead of the tables")
    parser.add_argument("--profile", action="store_true", help="also show where the time goes")
    args = parser.parse_args()
    result = measure(args.scenario, args.runs, args.json)
    ok = result["solve_median_s"] <= TARGET_S and result["ratio"] <= TARGET_RATIO
    result.update({"scenario": args.scenario, "cores": os.cpu_count(), "target_met": ok})
    print(json.dumps(result, indent=2))
    print(f"ftopt solve {args.scenario}: median {result['solve_median_s']:.3f} s (target <= {TARGET_S} s); "
          f"bare import median {result['import_median_s']:.3f} s; ratio {result['ratio']:.2f} "
          f"(target <= {TARGET_RATIO}); {'met' if ok else 'MISSED'}")  # fmt: skip
    if args.profile:
        profile(args.scenario)


if __name__ == "__main__":
    main()
