"""Fuzzing the CLI with mutated scenario and catalog documents (hypothesis).

Whatever the document, ``ftopt solve`` either succeeds (exit 0, JSON on stdout) or exits 2 with exactly one line
on stderr; never a traceback, never exit 1. The CLI runs in-process with exceptions not caught by the runner, so
an uncaught exception fails the test with its traceback. Each mutated document starts from a valid one whose
candidate space is small (plan.gpu or allow.gpus pinned), so an example costs a fraction of a second.
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import REPO, scenario_doc

CORPUS = REPO / "tests" / "bad_inputs"
FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

SCENARIO = scenario_doc(plan={"gpu": "A100-80G", "cards": 1}, budget={"amount": 100, "currency": "USD"},
                        deadline_hours=48)  # fmt: skip
OFFERS: dict[str, Any] = {
    "schema_version": 1,
    "currency": "USD",
    "offers": [{
        "id": "fuzz-a100", "provider": "Fuzz", "gpu": "A100-80G", "cards_per_node": 8, "max_nodes": 2,
        "inter_node_gb_per_s": 25.0, "hour_increment_s": 60,
        "prices": {"hour": {"amount": 1.5, "source": "made up for the fuzz test", "as_of": "2026-01-01"},
                   "day": {"amount": 30.0, "source": "made up for the fuzz test", "as_of": "2026-01-01"}},
    }],
}  # fmt: skip

# Values a hand-edited file might hold where something else was expected.
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "0", "-1", "1e400", "nan", "A100-80G", "lora", "USD", "hour", "bf16", "all", "3"]),
)
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6),
                                                                                          inner, max_size=3),
                      max_leaves=6)  # fmt: skip


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path of a nested document (dict keys and list indices), the root excluded."""
    out: list[tuple] = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    for key, value in items:
        out.append((*prefix, key))
        out.extend(_paths(value, (*prefix, key)))
    return out


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """``base`` after one to three mutations: a value replaced, a key deleted or an unknown key added."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        op = draw(st.sampled_from(["replace", "delete", "add"]))
        if op == "replace":
            parent[path[-1]] = draw(values)
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(values)
    return doc


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)


def _check(result: Any) -> None:
    """Exit 0 with a plan, 1 with a JSON answer without one, or 2 with one error line; anything else fails."""
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.stderr)
    if result.exit_code == 0:
        assert json.loads(result.stdout)["status"] in ("optimal", "feasible")
    elif result.exit_code == 1:
        assert json.loads(result.stdout)["status"] == "infeasible"
    else:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("ftopt: error: "), result.stderr
        assert result.stdout == ""


@FUZZ
@given(doc=mutated(SCENARIO))
def test_mutated_scenario_succeeds_or_fails_with_one_line(doc, run_cli):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.yaml"
        path.write_text(_dump(doc), encoding="utf-8")
        _check(run_cli("solve", path, "--json"))


@FUZZ
@given(doc=mutated(OFFERS))
def test_mutated_offers_catalog_succeeds_or_fails_with_one_line(doc, run_cli):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "offers.yaml"
        path.write_text(_dump(doc), encoding="utf-8")
        _check(run_cli("solve", CORPUS / "_good.yaml", "--catalog", path, "--json"))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=200) | st.binary(max_size=200))
def test_arbitrary_text_or_bytes_as_a_scenario_fail_with_one_line(text, run_cli):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "noise.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
        _check(run_cli("solve", path, "--json"))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.floats(allow_nan=True, allow_infinity=True), hours=st.floats(allow_nan=True, allow_infinity=True))
def test_arbitrary_command_line_budget_and_deadline_succeed_or_fail_with_one_line(budget, hours, run_cli):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.yaml"
        path.write_text(_dump(SCENARIO), encoding="utf-8")
        _check(run_cli("solve", path, "--json", "--budget", repr(budget), "--deadline-hours", repr(hours)))
