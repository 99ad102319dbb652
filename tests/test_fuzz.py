"""Fuzzing the CLI with mutated scenario and catalog documents (hypothesis), and every input file kind's loader.

Whatever the document, ``ftopt solve`` either succeeds (exit 0, JSON on stdout) or exits 2 with exactly one line
on stderr; never a traceback, never exit 1. The CLI runs in-process with exceptions not caught by the runner, so
an uncaught exception fails the test with its traceback. Each mutated document starts from a valid one whose
candidate space is small (plan.gpu or allow.gpus pinned), so an example costs a fraction of a second.
"""

from __future__ import annotations

import copy
import json
import random
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optimizer.inputs.catalog import import_hf_config, load_catalog, load_scenario, resolve_model
from optimizer.inputs.errors import FtoptError
from optimizer.inputs.import_skypilot import import_text
from optimizer.inputs.importers import from_nvidia_smi, from_torchtune_log, from_trainer_state
from optimizer.inputs.measurement import load_cases
from optimizer.inputs.terminal import escape
from optimizer.models.overlay import load_overlay
from optimizer.portfolio.plan import load_portfolio
from optimizer.solve.batch import read_rows

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


# ------------------------------------------------------------------------------------------------ every file type
# A seeded byte-level fuzz over every kind of file ftopt reads. Each case starts from a valid file of that kind,
# applies one to three hostile edits (a 5,000-digit integer, deep nesting, a 300,000-character string, control and
# invalid bytes, markup, YAML tags and aliases, a truncation, a deleted or repeated span) and hands it to the
# loader that reads that kind. The loader must return or raise an FtoptError (one line, no content of a file that
# is not a mapping); anything else, or a case running past CASE_S seconds (a hang), fails with the case number.

SEED = 25
CASES_PER_KIND = 40  # 12 kinds: 480 cases, about 10 s on one core
CASE_S = 10  # a case this slow is a hang, not a slow parser
LOGS = REPO / "tests" / "data" / "measurements"
HOSTILE = [b"9" * 5000, b"[" * 3000, b"{\"a\":" * 200, b"x" * 300_000, b"\x00", b"\xff\xfe", b"\x1b[2J", b"[/x]",
           b"&a [*a, *a]", b"!!python/object/apply:os.system ['true']", b"inf", b"nan", b"-1", b"0.5", b"1e400",
           b"\xef\xbb\xbf", b"\r\n", b"\t", b": :", b"- - -", b"\"", b",,,,", b"*b", b"%YAML 9.9", b"---\n---",
           b"Step 9 | tokens_per_second_per_gpu:1e999"]  # fmt: skip
QWEN = {"hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28,
        "num_key_value_heads": 4, "vocab_size": 152064, "model_type": "qwen2", "torch_dtype": "bfloat16",
        "_name_or_path": "Qwen/Qwen2.5-7B"}  # fmt: skip
SKYPILOT = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region\n"
            "g6e.12xlarge,L40S,4.0,48.0,384.0,,10.4926,4.2,us-west-2\n"
            "p5en.48xlarge,H200,8.0,192.0,2048.0,,63.296,27.0,us-east-2\n")  # fmt: skip


def _mutate(rng: random.Random, data: bytes) -> bytes:
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data) + 1)
        op = rng.choice(["insert", "insert", "replace", "delete", "repeat", "truncate", "flip"])
        if op == "insert":
            data = data[:at] + rng.choice(HOSTILE) + data[at:]
        elif op == "replace":
            end = min(len(data), at + rng.randint(1, 12))
            data = data[:at] + rng.choice(HOSTILE) + data[end:]
        elif op == "delete":
            data = data[:at] + data[at + rng.randint(1, 40):]
        elif op == "repeat":
            data = data[:at] + data[at:at + 80] * rng.randint(2, 50) + data[at:]
        elif op == "truncate":
            data = data[:at]
        elif data:
            i = rng.randrange(len(data))
            data = data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]
    return data


def _scenario(path: Path) -> None:
    sc = load_scenario(path)
    arch = resolve_model(sc, load_catalog(), path)
    escape(f"{sc.name} {arch.name}")


def _hf_config(path: Path) -> None:
    (path.parent / "model.safetensors.index.json").write_text('{"metadata": {"total_size": 15231233024}}')
    import_hf_config(path)


def _index(path: Path) -> None:  # the safetensors index beside a config.json (the parameter cross-check)
    (path.parent / "config.json").write_text(json.dumps({**QWEN, "_name_or_path": "custom-7b"}))
    doc = scenario_doc(model={"hf_config": "config.json"})
    scenario = path.parent / "s.yaml"
    scenario.write_text(_dump(doc))
    sc = load_scenario(scenario)
    resolve_model(sc, load_catalog(), scenario)


def _portfolio(path: Path) -> None:
    (path.parent / "job.yaml").write_text(_dump(scenario_doc()))
    load_portfolio(path)


def _skypilot(path: Path) -> None:
    import_text([path], path.parent / "out.yaml", "aws")


RUN_DOC = None


def _run_doc() -> dict[str, Any]:
    global RUN_DOC
    if RUN_DOC is None:
        RUN_DOC = yaml.safe_load((LOGS / "run_scenario.yaml").read_text())
    return RUN_DOC


KINDS: dict[str, tuple[str, bytes, Any]] = {
    "scenario": ("s.yaml", _dump(SCENARIO).encode(), _scenario),
    "offers": ("offers.yaml", _dump(OFFERS).encode(), lambda p: load_catalog([p])),
    "portfolio": ("pf.yaml", _dump({"name": "p", "currency": "USD", "horizon_days": 10, "jobs": [
        {"name": "j", "scenario": "job.yaml", "release_day": 0, "due_day": 5}], "catalog": "us"}).encode(),
        _portfolio),  # fmt: skip
    "overlay": ("overlay.yaml", (REPO / "tests/data/measurements/run_scenario.yaml").read_bytes(), load_overlay),
    "measurements": ("cases.yaml", (REPO / "tests/data/reference/memory_cases.yaml").read_bytes()[:20_000],
                     load_cases),  # fmt: skip
    "hf_config": ("config.json", json.dumps(QWEN, indent=1).encode(), _hf_config),
    "safetensors_index": ("model.safetensors.index.json", b'{"metadata": {"total_size": 15231233024}, '
                          b'"weight_map": {"a": "b"}}', _index),  # fmt: skip
    "trainer_state": ("trainer_state.json", (LOGS / "trainer_state.json").read_bytes(),
                      lambda p: from_trainer_state(p, _run_doc())),  # fmt: skip
    "torchtune": ("log.txt", (LOGS / "torchtune_log.txt").read_bytes(), lambda p: from_torchtune_log(p, _run_doc())),
    "nvidia_smi": ("smi.csv", (LOGS / "nvidia_smi.csv").read_bytes(), lambda p: from_nvidia_smi(p, _run_doc())),
    "skypilot_csv": ("vms.csv", SKYPILOT.encode(), _skypilot),
    "batch_results": ("rows.jsonl", b'{"scenario": "a.yaml", "status": "optimal"}\n', read_rows),
}


def _hang(*_: object) -> None:
    raise TimeoutError("hung")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_input_kind_survives_hostile_bytes(kind, tmp_path):
    name, base, load = KINDS[kind]
    rng = random.Random(f"{SEED}-{kind}")
    old = signal.signal(signal.SIGALRM, _hang)
    try:
        for case in range(CASES_PER_KIND):
            folder = tmp_path / f"{case}"
            folder.mkdir()
            path = folder / name
            path.write_bytes(_mutate(rng, base))
            signal.alarm(CASE_S)
            t0 = time.perf_counter()
            try:
                load(path)
            except FtoptError as exc:
                message = str(exc)
                assert "\n" not in message and "\x1b" not in message, (kind, case, message)
                assert "Traceback" not in message
            except Exception as exc:  # noqa: BLE001 - the point of the test
                pytest.fail(f"{kind} case {case} (seed {SEED}): {type(exc).__name__}: {str(exc)[:300]}")
            finally:
                signal.alarm(0)
            assert time.perf_counter() - t0 < CASE_S
    finally:
        signal.signal(signal.SIGALRM, old)
