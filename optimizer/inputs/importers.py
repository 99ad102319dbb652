"""Turn the logs people already have into measurements (optimizer/inputs/measurement.py), given the scenario that ran.

A log does not say which model, GPU and configuration produced it, so each importer takes the scenario document
(a scenario file whose ``plan`` pins gpu, cards, micro_batch and the rest) and returns one case:

- HF Trainer ``trainer_state.json``: the final ``log_history`` entry holds ``train_runtime``,
  ``train_samples_per_second`` and ``train_steps_per_second`` (transformers ``trainer_utils.speed_metrics``),
  and ``train_tokens_per_second`` when ``include_tokens_per_second`` was on ("tokens per second per device",
  TrainingArguments docstring). tokens/s per GPU is that figure when present, else
  samples/s x seq_len / cards (assumes sequences packed or padded to the scenario's ``seq_len``); step seconds
  are 1 / steps/s. ``train_runtime`` includes the first, slow steps, so short runs read pessimistic.
- torchtune metric logs (``DiskLogger``: one line ``Step N | key:value key:value ...`` per logged step,
  pytorch/torchtune:torchtune/training/metric_logging.py): ``tokens_per_second_per_gpu`` is the median over the
  steps after the first ``skip`` (warm-up), memory the largest ``peak_memory_alloc`` (GiB, ``max_memory_allocated``
  / 2^30, pytorch/torchtune:torchtune/training/memory.py@0331778 ``get_memory_stats``).
- ``nvidia-smi --query-gpu=memory.used --format=csv`` captures (with or without ``,noheader,nounits``, one row per
  GPU and sample, e.g. from ``-l 1``): the largest value, in MiB, converted to GiB; metric ``nvidia-smi``.
- JSON or YAML measurement files (the probe's output, the reference cases) are read as they are.
"""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
from pathlib import Path
from typing import Any

from optimizer.inputs.errors import InputError
from optimizer.inputs.inputfile import MAX_LOG_BYTES, parse_json, read_text
from optimizer.inputs.measurement import PINNED, Case, load_cases, parse_cases

MIB_PER_GIB = 1024.0
TORCHTUNE_LINE = re.compile(r"^Step (\d+) \| (.*)$")
TORCHTUNE_PAIR = re.compile(r"(\S+?):(\S+)")


def _text(path: Path) -> str:
    return read_text(path, str(path), MAX_LOG_BYTES, "a log or measurement file")


def detect(path: str | Path) -> str:
    """``trainer_state`` | ``torchtune`` | ``nvidia-smi`` | ``cases``, from the file's content."""
    p = Path(path)
    text = _text(p)
    head = text.lstrip()[:4096]
    if head.startswith("{") and '"log_history"' in text:
        return "trainer_state"
    if any(TORCHTUNE_LINE.match(line) for line in text.splitlines()[:50]):
        return "torchtune"
    first = head.splitlines()[0] if head else ""
    if "memory.used" in first or re.fullmatch(r"\s*\d+(\.\d+)?(\s*MiB)?\s*", first):
        return "nvidia-smi"
    return "cases"


def _base(scenario: dict[str, Any], run_id: str, source: str, notes: str) -> dict[str, Any]:
    return {"id": run_id, "source": source, "kind": "measured", "scenario": scenario, "notes": notes}


def _positive(entry: dict[str, Any], key: str, source: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an integer of hundreds of digits
        number = math.inf
    if not (number > 0 and math.isfinite(number)):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise InputError(source, f"log_history[-1].{key}", f"expected a positive finite number, got {shown}")
    return number


def from_trainer_state(path: str | Path, scenario: dict[str, Any], run_id: str | None = None) -> Case:
    """A time measurement from HF Trainer's ``trainer_state.json`` (see the module docstring)."""
    p = Path(path)
    source = str(p)
    doc = parse_json(_text(p), source, "HF Trainer's trainer_state.json")
    history = doc.get("log_history") if isinstance(doc, dict) else None
    if not isinstance(history, list):
        raise InputError(source, "log_history", "expected HF Trainer's trainer_state.json with a log_history list")
    final = next((e for e in reversed(history) if isinstance(e, dict) and "train_runtime" in e), None)
    if final is None:
        raise InputError(source, "log_history", "no entry with train_runtime: the run did not finish training")
    tokens = _positive(final, "train_tokens_per_second", source)
    samples = _positive(final, "train_samples_per_second", source)
    steps = _positive(final, "train_steps_per_second", source)
    cards = int(scenario["plan"]["cards"])
    note = "HF Trainer trainer_state.json; train_runtime includes the first (slow) steps."
    if tokens is None:
        if samples is None:
            raise InputError(source, "log_history[-1].train_samples_per_second", "missing; cannot derive tokens/s")
        tokens = samples * float(scenario["seq_len"]) / cards
        note += " tokens/s = train_samples_per_second x seq_len / cards (sequences assumed packed to seq_len)."
    measured: dict[str, Any] = {"tokens_per_second_per_gpu": round(tokens, 6)}
    if steps is not None:
        measured["step_seconds"] = round(1.0 / steps, 6)
    case = {**_base(scenario, run_id or f"{p.parent.name or 'run'}-trainer-state", source, note), "measured": measured}
    return parse_cases(case, source)[0]


def _torchtune_rows(text: str, source: str) -> list[dict[str, float]]:
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        m = TORCHTUNE_LINE.match(line.strip())
        if not m:
            continue
        row: dict[str, float] = {}
        for key, value in TORCHTUNE_PAIR.findall(m.group(2)):
            try:
                row[key] = float(value)
            except ValueError:
                raise InputError(source, f"line {n}", f"{key}: expected a number, got {value!r}") from None
        rows.append(row)
    return rows


def from_torchtune_log(path: str | Path, scenario: dict[str, Any], run_id: str | None = None, skip: int = 1) -> Case:
    """Time (median tokens/s per GPU after ``skip`` warm-up steps) and memory (largest peak_memory_alloc, GiB)."""
    p = Path(path)
    source = str(p)
    rows = _torchtune_rows(_text(p), source)
    speeds = [r["tokens_per_second_per_gpu"] for r in rows if "tokens_per_second_per_gpu" in r]
    speeds = speeds[skip:] if len(speeds) > skip else speeds
    peaks = [r["peak_memory_alloc"] for r in rows if "peak_memory_alloc" in r]
    measured: dict[str, Any] = {}
    if speeds:
        measured["tokens_per_second_per_gpu"] = round(statistics.median(speeds), 6)
    if peaks:
        measured.update(peak=round(max(peaks), 6), unit="GiB", metric="allocated")
        others = {"reserved": "peak_memory_reserved"}
        found = {k: max(r[v] for r in rows if v in r) for k, v in others.items() if any(v in r for r in rows)}
        if found:
            measured["peaks"] = {k: round(v, 6) for k, v in found.items()}
    if not measured:
        raise InputError(source, "", "no tokens_per_second_per_gpu or peak_memory_alloc in the torchtune log")
    note = f"torchtune metric log; median tokens/s over {len(speeds)} logged steps, largest peak_memory_alloc."
    case = {**_base(scenario, run_id or f"{p.stem}-torchtune", source, note), "measured": measured}
    return parse_cases(case, source)[0]


def _mib_values(text: str, source: str) -> list[float]:
    values = []
    reader = csv.reader(io.StringIO(text))
    try:
        for row in reader:
            cells = [c.strip() for c in row if c.strip()]
            if not cells or any("memory.used" in c for c in cells):
                continue
            cell = cells[-1]  # memory.used is the last column when index or name were queried too
            m = re.fullmatch(r"(\d{1,12}(?:\.\d{0,12})?)\s*(MiB)?", cell)
            if not m:
                shown = repr(cell) if len(cell) <= 40 else repr(cell[:37]) + "..."
                raise InputError(source, f"line {reader.line_num}", f"expected memory.used in MiB (e.g. '12345 MiB'), "
                                 f"got {shown}")  # fmt: skip
            values.append(float(m.group(1)))
    except csv.Error as exc:
        raise InputError(source, f"line {reader.line_num + 1}", f"not a readable CSV row: {exc}") from None
    if not values:
        raise InputError(source, "", "no memory.used values in the nvidia-smi capture")
    return values


def from_nvidia_smi(path: str | Path, scenario: dict[str, Any], run_id: str | None = None) -> Case:
    """A memory measurement (metric nvidia-smi, GiB) from the largest memory.used of a capture."""
    p = Path(path)
    source = str(p)
    peak_gib = max(_mib_values(_text(p), source)) / MIB_PER_GIB
    note = "nvidia-smi --query-gpu=memory.used capture; largest value over GPUs and samples, MiB / 1024 = GiB."
    case = {**_base(scenario, run_id or f"{p.stem}-nvidia-smi", source, note),
            "measured": {"peak": round(peak_gib, 6), "unit": "GiB", "metric": "nvidia-smi"}}  # fmt: skip
    return parse_cases(case, source)[0]


IMPORTERS = {"trainer_state": from_trainer_state, "torchtune": from_torchtune_log, "nvidia-smi": from_nvidia_smi}


def read_measurements(path: str | Path, scenario: dict[str, Any] | None,
                      scenario_source: str = "--scenario") -> list[Case]:  # fmt: skip
    """The cases of a measurement file, or the one case imported from a log (which needs ``scenario``)."""
    kind = detect(path)
    if kind == "cases":
        return load_cases(path)
    if scenario is None:
        raise InputError(str(path), "", f"a {kind} log does not say what ran; pass --scenario FILE (pinned plan)")
    if not isinstance(scenario.get("plan"), dict):
        raise InputError(scenario_source, "plan", "pin the configuration that ran (gpu, cards, micro_batch, ...)")
    missing = [k for k in PINNED if scenario["plan"].get(k) is None]
    if missing:  # the importers read them (tokens per GPU divide by cards); the scenario file is what lacks them
        raise InputError(scenario_source, "plan", f"pin the configuration that ran: gpu, cards and micro_batch at "
                         f"least; missing: {', '.join(missing)}")  # fmt: skip
    return [IMPORTERS[kind](path, scenario)]

