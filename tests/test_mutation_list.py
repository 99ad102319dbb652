"""bench/mutation.py's list stays current: every pattern still plants its bug, cheaply, without running a mutant.

A pattern that stops matching (a renamed column, a rewritten line) silently stops planting its bug; this test and
the mutation check itself (exit status 2 on a stale pattern) make that loud.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _load():
    spec = importlib.util.spec_from_file_location("ftopt_bench_mutation", REPO / "bench" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


MUTATION = _load()
IDS = [m.id for m in MUTATION.MUTATIONS]


def test_ids_are_unique():
    assert sorted({i for i in IDS if IDS.count(i) > 1}) == []


@pytest.mark.parametrize("mutation", MUTATION.MUTATIONS, ids=IDS)
def test_each_pattern_still_changes_its_file(mutation):
    assert MUTATION.stale([mutation]) == []


def test_a_stale_pattern_stops_the_check(tmp_path):
    gone = MUTATION.Mutation("gone", "solver", ("optimizer/solve/solver.py",), r"no such line anywhere \(\)", "",
                             ("tests/test_pareto.py",), "a pattern the code no longer has")  # fmt: skip
    no_test = MUTATION.Mutation("no-test", "solver", ("optimizer/solve/solver.py",), r"import math", "import cmath",
                                ("tests/test_no_such_file.py",), "targets a test file that is gone")  # fmt: skip
    problems = MUTATION.stale([gone, no_test, MUTATION.MUTATIONS[0]])
    assert [p.split(":")[0] for p in problems] == ["gone", "no-test"]
    saved = MUTATION.MUTATIONS[:]
    try:
        MUTATION.MUTATIONS.append(gone)
        assert MUTATION.main(["--only", "gone", "--no-baseline"]) == 2
        assert MUTATION.main(["--list", "--only", "gone"]) == 1
    finally:
        MUTATION.MUTATIONS[:] = saved
