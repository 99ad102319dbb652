"""The Ray backend gives the same rows as the local pool (runs only where Ray is installed: pip install .[ray])."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.gen_scenarios import write_scenarios
from optimizer.solve.batch import Backend, run_batch

from .conftest import REPO

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    """A Ray started by the test on this machine with 2 CPUs, shut down afterwards."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


def test_ray_rows_equal_local_rows(local_ray, tmp_path: Path):
    paths = [str(p) for p in write_scenarios(10, tmp_path / "s", seed=7)]
    paths.append(str(REPO / "scenarios" / "70b.yaml"))  # names its catalog relative to the working directory
    (tmp_path / "broken.yaml").write_text("model: [unclosed\n")
    paths.append(str(tmp_path / "broken.yaml"))
    run_batch(paths, tmp_path / "local.jsonl", workers=2)
    summary = run_batch(paths, tmp_path / "ray.jsonl", backend=Backend.ray)
    assert summary.solved == len(paths) and summary.counts["error"] == 1
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()


def test_ray_batch_resumes_from_the_local_output(local_ray, tmp_path: Path):
    paths = [str(p) for p in write_scenarios(4, tmp_path / "s", seed=8)]
    out = tmp_path / "results.jsonl"
    run_batch(paths[:2], out, workers=1)
    summary = run_batch(paths, out, backend=Backend.ray)
    assert (summary.skipped, summary.solved) == (2, 2)


def test_batch_cli_runs_on_ray(local_ray, run_cli, tmp_path: Path):
    out = tmp_path / "results.csv"
    res = run_cli("batch", REPO / "scenarios" / "7b-qlora.yaml", "-o", out, "--backend", "ray")
    assert res.exit_code == 0, res.output
    assert out.read_text().splitlines()[1].split(",")[2] == "optimal"
