"""The winner's curse on the shipped scenarios: does the chosen plan sit where the model is most optimistic?

The solver picks the cheapest (or fastest) plan, so where the step-time model is too optimistic it is drawn there.
For every scenario in scenarios/ this solves the scenario, takes the chosen plan's coverage cell (GPU architecture,
engine, method, sharding, offload, nodes; optimizer/models/coverage.py) and its predicted hardware FLOPs
utilisation (HFU: FLOPs executed per token, recomputation included, x tokens/s per GPU / the GPU's dense peak in
the plan's precision; timing.job_time), and compares them with the published runs (the scored cases of
bench/loso.py): is there a run in the cell, does the plan's predicted HFU exceed the best HFU any run of the cell
and precision reached (calibration ``accuracy.time_coverage.best_hfu``), and where it does, how far the efficiency
ceiling moves the slow end of its time band. MFU is shown too (model FLOPs, no recomputation).

    python bench/winners_curse.py            # table and summary (markdown)
    python bench/winners_curse.py --loso     # also: the reference cases predicted above the OTHER sources' best
                                             # run of their cell, their error and the error a cap would give

Deterministic: scenarios in name order, the solver's deterministic settings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import loso  # noqa: E402

from optimizer.inputs.catalog import load_catalog  # noqa: E402
from optimizer.models import coverage as cov  # noqa: E402
from optimizer.models import hosts  # noqa: E402
from optimizer.solve.planner import solve_scenario  # noqa: E402


def shipped() -> None:
    """The table over scenarios/*.yaml."""
    catalog = load_catalog(None)
    accuracy = catalog.calibration["accuracy"]
    offers = {o.id: o for o in catalog.offers}
    rows, outside, above, staged = [], 0, 0, 0
    scenarios = sorted((REPO / "scenarios").glob("*.yaml"))
    for path in scenarios:
        result = solve_scenario(path)
        est, sc = result.best, result.scenario
        if est.plan is None or est.offer is None or est.time is None or est.uncertainty is None:
            rows.append(f"| {path.name} | infeasible | | | | | |")
            continue
        p, t, band = est.plan, est.time, est.uncertainty.time
        engine = cov.engine(sc.training.framework.value, sc.training.sharding.value)
        gpu, offer = catalog.gpus[p.gpu], offers[est.offer.id]
        cell = cov.cell(gpu.arch, engine, sc.method.value, p.zero_stage, p.offload.value, p.nodes,
                        cov.staged(hosts.p2p(gpu, offer), p.cards, p.nodes))  # fmt: skip
        covered = cov.covered(accuracy, cell)
        best = band.best_published_hfu
        outside += not covered
        above += bool(band.above_published_runs)
        staged += bool(band.no_peer_to_peer)
        shown = "no published run" if not covered else ("no run in this precision" if best is None else f"{best:.1%}")
        slow = f"{band.hours_p90:,.1f} h (x{band.ratio_p90:g})"
        rows.append(f"| {path.name} | {p.gpu} x {p.cards} (tp {p.tp}, zero {p.zero_stage}, {p.offload.value}, "
                    f"ckpt {p.checkpointing.value}, {p.precision.value}) | {cell} | {t.mfu:.1%} | {t.hfu:.1%} | "
                    f"{shown} | {'yes: ' + slow if band.above_published_runs else 'no'} |")  # fmt: skip
    print("| scenario | chosen plan | cell | predicted MFU | predicted HFU | best published HFU (cell, precision) "
          "| above it: slow end |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    n = len(scenarios)
    print(f"\nchosen plans outside every published run's cell: {outside} of {n}; predicted HFU above the best "
          f"published in their cell and precision: {above} of {n - outside} covered; without peer-to-peer (the "
          f"band of the runs without it): {staged}")


def held_out() -> None:
    """Reference cases predicted (leave-one-source-out) above the other sources' best HFU of their cell."""
    rows = loso.loso(loso.load_cases(), load_catalog(None).calibration["timing"])
    ceiling = loso.other_best_hfu(rows)
    print("\n| case | cell | precision | predicted HFU | other sources' best | error | error if capped |")
    print("|---|---|---|---|---|---|---|")
    hits = 0
    for r in rows:
        c = cov.ceiling_ratio(r.hfu, ceiling.get(r.case.id))
        if c <= 1.0:
            continue
        hits += 1
        capped = r.predicted / c / r.case.published - 1.0
        print(f"| {r.case.id} | {r.case.cell} | {r.case.precision} | {r.hfu:.1%} | {ceiling[r.case.id]:.1%} | "
              f"{r.error:+.1%} | {capped:+.1%} |")
    print(f"\n{hits} of {len(rows)} cases predicted above the other sources' best run of their cell and precision")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loso", action="store_true", help="also the held-out cases above their cell's ceiling")
    args = parser.parse_args()
    shipped()
    if args.loso:
        held_out()


if __name__ == "__main__":
    main()
