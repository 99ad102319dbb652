"""Measurements: a user's own run in the reference-case schema of ``tests/data/reference/README.md``.

A measurement is a case: ``{id, source, kind, scenario, measured, notes}``, where ``scenario`` is a scenario file
(docs/scenario-reference.md) whose ``plan`` pins the configuration that ran, and ``measured`` holds what was read:

- memory: ``{peak, unit, metric}`` (unit GB = 1e9 bytes or GiB = 2^30 bytes; metric allocated | reserved |
  nvidia-smi | unknown), optionally ``bound`` (fits | oom | at_capacity) for boundary observations and ``peaks``
  (the other counters of the same run, same unit, e.g. ``{reserved: 17.2, nvidia-smi: 18.0}``);
- time: ``tokens_per_second_per_gpu`` and/or ``step_seconds`` (seconds per optimizer step), or
  ``model_tflops_per_gpu`` / ``minutes`` + ``tokens`` as the published cases give them.

Every published case of ``memory_cases*.yaml`` and ``throughput_cases*.yaml`` is therefore a valid measurement,
and so is what ``ftopt probe``'s script writes. A file holds ``cases: [...]`` (other top-level keys such as the
reference files' ``facts`` are ignored), a list of cases, or one case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from optimizer.inputs.errors import InputError
from optimizer.inputs.schema import Float, Scenario, Strict
from optimizer.inputs.yamlio import read_yaml, validate

Metric = Literal["allocated", "reserved", "nvidia-smi", "unknown"]
UNIT_BYTES: dict[str, float] = {"GB": 1e9, "GiB": 2.0**30}
PositiveOrNone = Float | None


class Measured(Strict):
    """What a run measured, per GPU (see the module docstring for the units)."""

    peak: PositiveOrNone = Field(None, gt=0, le=1e7, description="peak memory per GPU in ``unit``")
    unit: Literal["GB", "GiB"] | None = None
    metric: Metric | None = None
    per_gpu: bool = True
    bound: Literal["fits", "oom", "at_capacity"] | None = None
    peaks: dict[Literal["allocated", "reserved", "nvidia-smi"], Float] | None = Field(
        None, description="other counters of the same run, same unit (the probe records all three)"
    )
    tokens_per_second_per_gpu: PositiveOrNone = Field(None, gt=0, le=1e9)
    step_seconds: PositiveOrNone = Field(None, gt=0, le=1e7, description="seconds per optimizer step")
    model_tflops_per_gpu: PositiveOrNone = Field(None, gt=0, le=1e6)
    minutes: PositiveOrNone = Field(None, gt=0, le=1e8)
    tokens: PositiveOrNone = Field(None, gt=0, le=1e16)

    @model_validator(mode="after")
    def _something_measured(self) -> Measured:
        if self.peak is not None and (self.unit is None or self.metric is None):
            raise ValueError("a peak needs its unit (GB | GiB) and metric (allocated | reserved | nvidia-smi | "
                             "unknown)")
        if self.peak is None and self.peaks:
            raise ValueError("peaks (other counters) need a primary peak, unit and metric")
        timed = (self.tokens_per_second_per_gpu, self.step_seconds, self.model_tflops_per_gpu, self.minutes)
        if self.peak is None and all(v is None for v in timed):
            raise ValueError("nothing measured: give peak/unit/metric and/or tokens_per_second_per_gpu or step_seconds")
        if self.per_gpu is not True:
            raise ValueError("per_gpu must be true (divide totals over GPUs by the GPU count)")
        return self

    def peak_bytes(self) -> float | None:
        """The primary peak in bytes per GPU, or None."""
        return None if self.peak is None or self.unit is None else self.peak * UNIT_BYTES[self.unit]


PINNED = ("gpu", "cards", "micro_batch")  # what a measurement's scenario.plan must pin: the configuration that ran


class Case(Strict):
    """One measurement: the scenario with its pinned plan, and what was measured."""

    id: str = Field(min_length=1, max_length=200)
    source: str = Field("", description="where the figures come from (a file, a URL, owner/repo:path@commit)")
    kind: Literal["measured", "boundary", "derived"] = "measured"
    scenario: dict[str, Any]
    measured: Measured
    notes: str | None = None
    environment: dict[str, str | int | float | bool | None] | None = Field(
        None, description="GPU name, library versions and the like (the probe records them)"
    )

    @model_validator(mode="after")
    def _plan_pinned(self) -> Case:
        plan = self.scenario.get("plan")
        if not isinstance(plan, dict) or not set(PINNED) <= set(plan):
            raise ValueError("scenario.plan must pin at least gpu, cards and micro_batch (the configuration that ran)")
        return self


def _case_list(doc: Any, source: str) -> tuple[list[Any], str]:
    """The raw case mappings of a measurement document and the field prefix their errors use."""
    if isinstance(doc, dict) and "cases" in doc:
        if not isinstance(doc["cases"], list) or not doc["cases"]:
            raise InputError(source, "cases", "expected a non-empty list of measurements")
        return doc["cases"], "cases"
    if isinstance(doc, list) and doc:
        return doc, ""
    if isinstance(doc, dict):
        return [doc], "-"
    raise InputError(source, "", "expected a measurement (id, scenario, measured), a list of them or {cases: [...]}")


def parse_cases(doc: Any, source: str) -> list[Case]:
    """Validate a measurement document (see the module docstring); each case's scenario is validated too."""
    raw, prefix = _case_list(doc, source)
    cases: list[Case] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = "" if prefix == "-" else f"{prefix}[{i}]." if prefix else f"[{i}]."
        case = validate(Case, item, source, where)
        validate(Scenario, case.scenario, source, f"{where}scenario.")
        if case.id in seen:
            raise InputError(source, f"{where}id", f"duplicate measurement id '{case.id}'")
        seen.add(case.id)
        cases.append(case)
    return cases


def load_cases(path: str | Path) -> list[Case]:
    """Read and validate a measurement file (YAML or JSON)."""
    return parse_cases(read_yaml(path), str(path))


def dump_cases(cases: list[Case]) -> dict[str, Any]:
    """The ``{cases: [...]}`` document of ``cases`` (unset optional fields left out)."""
    return {"cases": [c.model_dump(mode="json", exclude_none=True) for c in cases]}
