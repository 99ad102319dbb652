"""The same scenario and catalog give byte-identical JSON: across processes (with different hash seeds, so that no
set or dict order leaks into the answer) and across batch worker counts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from optimizer.report import plan as report
from optimizer.solve.planner import solve_scenario

from .conftest import REPO

_SOLVE_EACH = """
import sys
from optimizer.cli.commands import main
for path in sys.argv[1:]:
    try:
        main(["solve", path, "--json", "--top", "3"])
    except SystemExit as exc:
        print(f"exit {exc.code}", flush=True)
"""


def _python(*args: object, hash_seed: str) -> subprocess.CompletedProcess:
    """Run ``python ARGS`` in a fresh interpreter from the repository root with the given hash seed."""
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.run([sys.executable, *map(str, args)], cwd=REPO, env=env, capture_output=True, timeout=120,
                          check=False)  # fmt: skip


@pytest.fixture
def scenarios(write_scenario) -> list[Path]:
    """A feasible, an infeasible (budget and deadline both binding) and a memory-bound scenario."""
    small = {"gpus": ["A100-80G", "H100-SXM"]}
    return [
        write_scenario("a-feasible.yaml", allow=small),
        write_scenario("b-tight.yaml", allow=small, budget={"amount": 0.01, "currency": "USD"}, deadline_hours=0.01),
        write_scenario("c-too-big.yaml", method="full", lora=None, plan={"gpu": "RTX-4090", "cards": 1,
                                                                           "zero_stage": 0}),  # fmt: skip
    ]


def test_solve_json_is_byte_identical_in_one_process(scenarios):
    for path in scenarios:
        first = report.dumps(report.solve_json(solve_scenario(path, top_k=3)))
        second = report.dumps(report.solve_json(solve_scenario(path, top_k=3)))
        assert first == second, path.name


def test_solve_json_and_errors_are_byte_identical_across_processes(scenarios):
    paths = [*scenarios, REPO / "scenarios" / "7b-lora.yaml", REPO / "tests" / "bad_inputs" / "s_unknown_model.yaml"]
    runs = [_python("-c", _SOLVE_EACH, *paths, hash_seed=seed) for seed in ("1", "2")]
    answered = runs[0].stdout.count(b"exit 0") + runs[0].stdout.count(b"exit 1")  # 1: answered without a plan
    assert answered == len(paths) - 1 and b"exit 2" in runs[0].stdout, runs[0].stderr
    assert runs[0].stdout == runs[1].stdout
    assert runs[0].stderr == runs[1].stderr


def test_batch_results_are_byte_identical_for_one_and_two_workers(scenarios, tmp_path):
    outputs = []
    for workers in (1, 2):
        out = tmp_path / f"rows-{workers}.jsonl"
        run = _python("-m", "optimizer.cli.commands", "batch", *scenarios, "-o", out, "--workers", workers,
                      hash_seed=str(workers))  # fmt: skip
        assert run.returncode == 0, run.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    assert outputs[0].count(b"\n") == len(scenarios)
