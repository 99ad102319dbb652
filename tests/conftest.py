"""Shared builders: scenario documents, scenario files, the built-in catalog, a CLI runner."""

from __future__ import annotations

import copy
import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from optimizer.cli.commands import main
from optimizer.inputs.catalog import load_catalog

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "tests" / "data" / "reference"  # the published cases with their sources (see its README)
HOST_RAM_GIB = 2048  # the node RAM a user states for the 70B job (allow.max_host_memory_gib)


@functools.cache
def seventy_b() -> Path:
    """scenarios/70b.yaml on the cn catalog with its nodes' host RAM stated (allow.max_host_memory_gib = HOST_RAM_GIB).

    The cn offers state no RAM and the default rule (hosts.host_ram_default) admits no 70B plan there, so the shipped
    file searches every catalog; tests that need the heavy multi-card, offloading cn plan state the RAM as a user would.
    """
    doc = yaml.safe_load((REPO / "scenarios" / "70b.yaml").read_text(encoding="utf-8"))
    doc["allow"]["max_host_memory_gib"] = HOST_RAM_GIB
    doc["catalog"] = "cn"
    path = Path(tempfile.mkdtemp(prefix="ftopt-70b-")) / "70b.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path

BASE_SCENARIO: dict[str, Any] = {
    "name": "test-7b-lora",
    "model": "Llama-3.1-8B",
    "method": "lora",
    "lora": {"rank": 16, "alpha": 32, "targets": ["q_proj", "k_proj", "v_proj", "o_proj"]},
    "data": {"tokens": 2.0e7, "epochs": 1},
    "seq_len": 2048,
    "global_batch": 32,
    "training": {"framework": "hf", "optimizer": "adamw", "attention": "flash"},
}


def scenario_doc(**changes: Any) -> dict[str, Any]:
    """BASE_SCENARIO with top-level keys replaced (a value of None deletes the key)."""
    doc = copy.deepcopy(BASE_SCENARIO)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


@pytest.fixture
def write_scenario(tmp_path: Path) -> Callable[..., Path]:
    """Write a scenario document (BASE_SCENARIO with changes) to a YAML file and return its path."""

    def _write(name: str = "scenario.yaml", doc: dict[str, Any] | None = None, **changes: Any) -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(doc if doc is not None else scenario_doc(**changes), sort_keys=False))
        return path

    return _write


@pytest.fixture(scope="session")
def catalog():
    """The built-in catalog with every offer file."""
    return load_catalog()


@pytest.fixture
def run_cli() -> Callable[..., Any]:
    """Invoke the console entry point in-process; returns click's Result (exit_code, stdout, stderr).

    Goes through ``optimizer.cli.commands.main`` so usage errors get the same one-line treatment as in a shell.
    """
    runner = CliRunner()

    def _run(*args: str) -> Any:
        return runner.invoke(_entry, [str(a) for a in args], catch_exceptions=False)

    return _run


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []})
@click.pass_context
def _entry(ctx: click.Context) -> None:
    main(list(ctx.args))


def timing_inputs(catalog: Any, gpu: str = "A100-80G", cards: Any = 1, *, tp: Any = 1, pp: Any = 1, zero_stage: Any = 0,
                  offload: str = "none", micro_batch: Any = 1, checkpointing: str = "none", precision: str = "bf16",
                  offer_changes: dict[str, Any] | None = None, gpu_changes: dict[str, Any] | None = None,
                  **scenario_changes: Any) -> tuple[Any, Any, Any, dict[str, Any]]:  # fmt: skip
    """(job, cfg, hw, timing constants) for the pure timing functions.

    BASE_SCENARIO with ``scenario_changes``, on the first catalog offer of ``gpu`` that can host every card count
    (``offer_changes``/``gpu_changes`` applied); array-valued layout arguments broadcast to one row per
    configuration; nodes = ceil(cards / cards_per_node).
    """
    import numpy as np

    from optimizer.inputs.catalog import resolve_model
    from optimizer.inputs.schema import Checkpointing, Offload, OptimizerName, Precision, Scenario
    from optimizer.models.configs import CHECKPOINTING, OFFLOAD, OPTIMIZER, PRECISION, Configs
    from optimizer.solve.space import hardware, make_job

    sc = Scenario.model_validate(scenario_doc(**scenario_changes))
    job = make_job(sc, resolve_model(sc, catalog), catalog.calibration)
    spec = catalog.gpus[gpu].model_copy(update=gpu_changes or {})
    need = int(np.max(cards))
    offer = next(o for o in catalog.offers if o.gpu == gpu and o.cards_per_node * o.max_nodes >= need)
    offer = offer.model_copy(update=offer_changes or {})
    layout = (cards, tp, pp, micro_batch, zero_stage)
    arrays = (np.atleast_1d(np.asarray(v, dtype=np.int64)) for v in layout)
    cards_a, tp_a, pp_a, mb_a, z_a = np.broadcast_arrays(*arrays)
    n = len(cards_a)
    dp = cards_a // (tp_a * pp_a)
    code = lambda values, v: np.full(n, values.index(v), dtype=np.int64)  # noqa: E731
    cfg = Configs(
        tp=tp_a, pp=pp_a, dp=dp, zero_stage=z_a, offload=code(OFFLOAD, Offload(offload)), micro_batch=mb_a,
        grad_accum=np.maximum(job.global_batch // (dp * mb_a), 1),
        checkpointing=code(CHECKPOINTING, Checkpointing(checkpointing)),
        precision=code(PRECISION, Precision(precision)),
        optimizer=code(OPTIMIZER, OptimizerName(sc.training.optimizer)),
    )  # fmt: skip
    nodes = -(-cards_a // offer.cards_per_node)
    consts = catalog.calibration["timing"]
    hw = hardware([spec], [offer], np.zeros(n, dtype=np.int64), cards_a, nodes, cfg.precision, consts)
    return job, cfg, hw, consts


@pytest.fixture(scope="session")
def loso_bench():
    """bench/loso.py as a module (leave-one-source-out accuracy of the step-time model)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("loso", REPO / "bench" / "loso.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("loso", module)
    spec.loader.exec_module(module)
    return sys.modules["loso"]


@pytest.fixture(scope="session")
def loso_cases(loso_bench):
    """Every throughput case, prepared once per session."""
    return loso_bench.load_cases()


@pytest.fixture(scope="session")
def loso_rows(loso_bench, loso_cases, catalog):
    """The leave-one-source-out predictions under the catalog's timing constants, computed once per session."""
    return loso_bench.loso(loso_cases, catalog.calibration["timing"])
