"""Portfolio planning speed: time to a proven optimum (or the bound at the limit) for two calendars.

1. Ten jobs over 90 days (the ten shipped scenarios, windows spread over the quarter), one owned RTX 4090 and a
   4090 buy option, the built-in CNY catalog. Goal: a proven bound in <= 10 s.
2. A daily job (8B LoRA, about 16 h a day on one RTX 4090) repeated 182 times over half a year with one buy option.
   Goal: <= 60 s.
3. The same daily job every day of a year (365 occurrences). Goal: proven within 2% of the bound in <= 60 s.
4. 50 jobs, 140 occurrences over 365 days (the shipped scenarios five times each, ten of them repeated ten times)
   on the cn and us catalogs (62 offers), one owned RTX 4090 and a buy option. Goal: within 5% of the bound in
   <= 60 s, under 2 GB (peak resident memory of the process is printed).
5. Not a goal, a stress case reported as measured: the same daily job with no buy option and a made-up offer whose
   month price (600 CNY per card) makes long shared rentals pay, so the model carries 182 x slots of shared runs.

Prints each run's status, total, bound, gap to the bound and wall time, then the median. Usage:
    python bench/bench_portfolio.py [--repeats 3] [--workers 1]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from optimizer.portfolio.plan import plan_portfolio
from optimizer.portfolio.schedule import Settings

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
BUY = {"gpu": "RTX-4090", "price": 16000, "life_years": 5, "resale_fraction": 0.2, "power_w": 450, "max_cards": 4}


def ten_jobs() -> dict:
    jobs = [{"name": p.stem, "scenario": str(p), "release_day": 7 * i, "due_day": 7 * i + 20}
            for i, p in enumerate(SCENARIOS[:10])]  # fmt: skip
    return {
        "name": "ten-jobs",
        "currency": "CNY",
        "horizon_days": 90,
        "jobs": jobs,
        "catalog": "cn",
        "owned": [{"gpu": "RTX-4090", "cards": 1, "power_w": 450}],
        "buy": [BUY],
        "electricity_per_kwh": 0.8,
    }


def daily() -> dict:
    job = {"name": "daily", "scenario": str(REPO / "scenarios" / "7b-lora.yaml"), "release_day": 0, "due_day": 1,
           "repeat": {"every_days": 1, "count": 182}}  # fmt: skip
    return {
        "name": "daily-182",
        "currency": "CNY",
        "horizon_days": 182,
        "jobs": [job],
        "catalog": "cn",
        "buy": [BUY],
        "electricity_per_kwh": 0.8,
    }


def daily_year() -> dict:
    doc = daily()
    doc["jobs"][0]["repeat"]["count"] = 365
    return {**doc, "name": "daily-365", "horizon_days": 365}


def fifty_jobs() -> dict:
    """50 jobs, 140 occurrences over a year, on the cn and us catalogs (62 offers).

    The ten shipped scenarios five times each; ten of the jobs repeat ten times, 33 days apart; 20-day windows.
    """
    jobs = []
    for i in range(50):
        scenario = SCENARIOS[i % len(SCENARIOS)]
        job = {"name": f"{scenario.stem}-{i}", "scenario": str(scenario), "release_day": (7 * i) % 300,
               "due_day": (7 * i) % 300 + 20}  # fmt: skip
        if i % 5 == 0:
            job.update(release_day=i % 30, due_day=i % 30 + 20, repeat={"every_days": 33, "count": 10})
        jobs.append(job)
    return {
        "name": "fifty-jobs",
        "currency": "CNY",
        "horizon_days": 365,
        "jobs": jobs,
        "catalog": ["cn", "us"],
        "owned": [{"gpu": "RTX-4090", "cards": 1, "power_w": 450}],
        "buy": [BUY],
        "electricity_per_kwh": 0.8,
    }


MONTHLY_OFFERS = {
    "schema_version": 1,
    "currency": "CNY",
    "offers": [
        {
            "id": "stress-4090-month",
            "provider": "Stress",
            "gpu": "RTX-4090",
            "cards_per_node": 8,
            "hour_increment_s": 1,
            "prices": {
                "hour": {"amount": 3.0, "source": "made up for the stress case", "as_of": "2026-12-01"},
                "month": {"amount": 600.0, "source": "made up for the stress case", "as_of": "2026-12-01"},
            },
        },
        {
            "id": "stress-a100-hour",
            "provider": "Stress",
            "gpu": "A100-80G",
            "cards_per_node": 8,
            "prices": {"hour": {"amount": 6.0, "source": "made up for the stress case", "as_of": "2026-12-01"}},
        },
    ],
}


def daily_shared() -> dict:
    doc = daily()
    del doc["buy"]
    return {**doc, "name": "daily-182-month-rental", "catalog": "offers.yaml"}


def run(doc: dict, repeats: int, settings: Settings, goal_s: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{doc['name']}.yaml"
        (Path(tmp) / "offers.yaml").write_text(yaml.safe_dump(MONTHLY_OFFERS, sort_keys=False))
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            result = plan_portfolio(path, settings)
            times.append(time.perf_counter() - start)
            total, bound = result.cost["total"], result.bound
            gap = f"{100 * (total / bound - 1):.2f}%" if total is not None and bound else "-"
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"  {doc['name']}: {result.status}, total {total} {result.currency}, bound {bound} (gap {gap}), "
                  f"{len(result.jobs)} occurrences, {times[-1]:.2f} s, peak RSS {rss:.0f} MiB")  # fmt: skip
        median = statistics.median(times)
        print(f"{doc['name']}: median {median:.2f} s over {repeats} runs (goal <= {goal_s:g} s, ratio "
              f"{median / goal_s:.2f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    run(ten_jobs(), args.repeats, Settings(time_limit_s=10, workers=args.workers), 10)
    run(daily(), args.repeats, Settings(time_limit_s=60, workers=args.workers), 60)
    run(daily_year(), args.repeats, Settings(time_limit_s=60, workers=args.workers), 60)
    run(fifty_jobs(), args.repeats, Settings(time_limit_s=60, workers=args.workers), 60)
    run(daily_shared(), 1, Settings(time_limit_s=60, workers=args.workers), 60)


if __name__ == "__main__":
    main()
