"""Batch throughput benchmark: N synthetic scenarios (1B-405B, every method, random budgets and deadlines)
solved by the local process pool and by Ray, plus the time of ``ftopt pareto scenarios/70b.yaml``.

Reports medians over repeated runs (each run writes a fresh output file, so nothing is skipped by resume).
Target (issue 5): at least 20 scenarios/s on 2 cores for 1,000 scenarios with the local backend.

    .venv/bin/python bench/bench_batch.py --n 1000 --workers 2 --repeats 3
    .venv/bin/python bench/bench_batch.py --n 200 --repeats 1 --no-ray --json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gen_scenarios import write_scenarios  # noqa: E402

from optimizer.solve.batch import Backend, run_batch  # noqa: E402
from optimizer.solve.pareto import pareto_scenario  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process and of its reaped children (the pool's workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def batch_rates(paths: list[str], backend: Backend, workers: int, repeats: int, tmp: Path) -> list[tuple[float, float]]:
    """(scenarios/s of wall clock, CPU seconds per scenario) of ``repeats`` full batches.

    Wall clock includes starting the pool or the tasks. CPU seconds count this process and the local pool's
    workers (not Ray's, which are not our children); workers / (CPU s per scenario) is the rate the same batch
    reaches when its cores are not shared with other programs.
    """
    rates = []
    for r in range(repeats):
        out = tmp / f"{backend.value}-{r}.jsonl"
        cpu0, t0 = _cpu_s(), time.perf_counter()
        summary = run_batch(paths, out, workers=workers, backend=backend)
        elapsed, cpu = time.perf_counter() - t0, _cpu_s() - cpu0
        assert summary.solved == len(paths), summary
        rates.append((len(paths) / elapsed, cpu / len(paths)))
        print(f"  {backend.value} run {r + 1}: {len(paths) / elapsed:,.1f} scenarios/s ({elapsed:.1f} s), "
              f"{1000 * cpu / len(paths):.1f} ms CPU per scenario, load {os.getloadavg()[0]:.1f} "
              f"{summary.counts}", file=sys.stderr)  # fmt: skip
    return rates


Rates = list[tuple[float, float]]  # per run: (scenarios/s of wall clock, CPU seconds per scenario)


def ray_rates(paths: list[str], workers: int, repeats: int, tmp: Path) -> tuple[Rates, float] | None:
    """Ray rates on a local Ray with ``workers`` CPUs (started once, warm for every repeat), and its start time."""
    try:
        import ray
    except ImportError:
        print("  ray: not installed (pip install '.[ray]'); skipped", file=sys.stderr)
        return None
    t0 = time.perf_counter()
    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    started_s = time.perf_counter() - t0
    try:
        return batch_rates(paths, Backend.ray, workers, repeats, tmp), started_s
    finally:
        ray.shutdown()


def pareto_times(repeats: int) -> dict[str, float]:
    """Median seconds of the 70B front: in process (after a warm-up) and as a fresh ``ftopt`` command."""
    path = REPO / "scenarios" / "70b.yaml"
    pareto_scenario(path)
    inproc = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        pareto_scenario(path)
        inproc.append(time.perf_counter() - t0)
    exe = str(Path(sys.executable).with_name("ftopt"))
    cli = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([exe, "pareto", str(path), "--json"], check=True, capture_output=True, cwd=REPO)
        cli.append(time.perf_counter() - t0)
    return {"pareto_70b_in_process_s": statistics.median(inproc), "pareto_70b_cli_s": statistics.median(cli)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="synthetic scenarios")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    os.chdir(REPO)  # the generated scenarios name catalogs relative to the repository
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        paths = [str(p) for p in write_scenarios(args.n, tmp / "scenarios", args.seed)]
        result: dict[str, object] = {"scenarios": args.n, "workers": args.workers, "repeats": args.repeats,
                                     "cpus": os.cpu_count()}  # fmt: skip
        local = batch_rates(paths, Backend.local, args.workers, args.repeats, tmp)
        cpu_per = statistics.median(c for _, c in local)
        result["local_scenarios_per_s"] = round(statistics.median(r for r, _ in local), 2)
        result["local_cpu_ms_per_scenario"] = round(1000 * cpu_per, 1)
        result["local_scenarios_per_s_on_free_cores"] = round(args.workers / cpu_per, 2)
        result["load_average_1min"] = round(os.getloadavg()[0], 2)
        if not args.no_ray:
            got = ray_rates(paths, args.workers, args.repeats, tmp)
            if got is not None:
                result["ray_scenarios_per_s"] = round(statistics.median(r for r, _ in got[0]), 2)
                result["ray_start_s"] = round(got[1], 2)
        result.update({k: round(v, 4) for k, v in pareto_times(args.repeats).items()})
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:28s} {v}")


if __name__ == "__main__":
    main()
