"""The winner's curse on the shipped scenarios: does the chosen plan sit where the model is most optimistic?

The solver picks the cheapest (or fastest) plan, so where the step-time model is too optimistic it is drawn there.
For every scenario in scenarios/ this solves the scenario, takes the chosen plan's coverage cell (GPU architecture,
engine, method, sharding, offload, nodes; optimizer/models/coverage.py) and its predicted MFU, and compares them with
the published runs (the scored cases of bench/loso.py): is there a run in the cell, and does the plan's predicted
MFU exceed the best MFU any run in the cell reached? MFU = model FLOPs per token (timing.model_flops_per_token) x
tokens/s per GPU / the GPU's dense bf16 peak, the same for plans and published runs.

    python bench/winners_curse.py            # table and summary (markdown)

Deterministic: scenarios in name order, the solver's deterministic settings.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import loso  # noqa: E402

from optimizer.inputs.catalog import load_catalog  # noqa: E402
from optimizer.models import coverage as cov  # noqa: E402
from optimizer.models import timing  # noqa: E402
from optimizer.solve.planner import solve_scenario  # noqa: E402


def published_mfu(case: loso.Case) -> float:
    """A reference case's MFU: model FLOPs per token x published tokens/s per GPU / dense bf16 peak."""
    job, _cfg, gpus, *_ = case.inputs
    peak = (gpus[0].bf16_tflops or gpus[0].fp16_tflops) * 1e12
    return timing.model_flops_per_token(job) * case.published / peak


def best_by_cell(cases: list[loso.Case]) -> dict[str, float]:
    """The highest published MFU in each coverage cell."""
    best: dict[str, float] = {}
    for c in cases:
        best[c.cell] = max(best.get(c.cell, 0.0), published_mfu(c))
    return best


def main() -> None:
    catalog = load_catalog(None)
    best = best_by_cell(loso.load_cases())
    rows, outside, above = [], 0, 0
    scenarios = sorted((REPO / "scenarios").glob("*.yaml"))
    for path in scenarios:
        result = solve_scenario(path)
        est, sc = result.best, result.scenario
        if est.plan is None or est.time is None:
            rows.append(f"| {path.name} | infeasible | | | | |")
            continue
        p = est.plan
        fw = sc.training.framework.value
        engine = f"hf_{sc.training.sharding.value}" if fw == "hf" else fw
        cell = cov.cell(catalog.gpus[p.gpu].arch, engine, sc.method.value, p.zero_stage, p.offload.value, p.nodes)
        reached = best.get(cell)
        outside += reached is None
        above += reached is not None and est.time.mfu > reached
        shown = "no published run" if reached is None else f"{reached:.1%}"
        rows.append(f"| {path.name} | {p.gpu} x {p.cards} (tp {p.tp}, pp {p.pp}, zero {p.zero_stage}, "
                    f"{p.offload.value}) | {cell} | {est.time.mfu:.1%} | {shown} | "
                    f"{'yes' if reached is not None and est.time.mfu > reached else 'no'} |")  # fmt: skip
    print("| scenario | chosen plan | cell | predicted MFU | best published MFU in the cell | above it |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    n = len(scenarios)
    print(f"\nchosen plans outside every published run's cell: {outside} of {n}; predicted MFU above the best "
          f"published in their cell: {above} of {n - outside} covered")


if __name__ == "__main__":
    main()
