"""Calibration overlays: a user's correction factors on top of the shipped calibration (``ftopt calibrate`` fits them).

An overlay is a final multiplicative correction of what the shipped models predict for a configuration, per group:

- time, group (GPU architecture, engine, method, precision), factor f_t = real / predicted step time:
  step_seconds' = f_t x step_seconds; tokens/s' = tokens/s / f_t; MFU' = MFU / f_t;
  hours' = hours + steps x step_seconds x (f_t - 1) / 3600 (start-up and checkpoint saves are not rescaled);
- memory, group (engine, method), factor f_m = measured / predicted peak: every per-GPU byte count of the
  breakdown (components, total, context, fragmentation) x f_m, so every counter (allocated, reserved, nvidia-smi)
  scales by f_m; host RAM for offloading is unchanged.

Engines are hf_deepspeed, hf_fsdp, torchtune, nemo (optimizer/models/engines.py ``engine_key``); architectures are
catalogs/gpus.yaml ``arch`` values. A configuration outside every group is left exactly as the shipped model has it.
The space applies the overlay after the models (optimizer/solve/space.py ``evaluate``), so the fit filter, pruning, the
solver and every report see corrected figures; the models themselves are untouched.

Each group also carries the uncertainty band that replaces calibration.yaml ``accuracy`` for plans in it (fitted
by optimizer/measure/calibrate.py; the formula is in its docstring): narrower with more own measurements, never narrower
than the group's own residuals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from optimizer.inputs.errors import InputError
from optimizer.inputs.schema import Float, Int, Method, Precision, Strict
from optimizer.inputs.yamlio import read_yaml, validate
from optimizer.models.configs import PRECISION

FORMAT = "ftopt-calibration-overlay/1"
Engine = Literal["hf_deepspeed", "hf_fsdp", "torchtune", "nemo"]
# the architectures catalogs/gpus.yaml names (schema_catalog.Gpu.arch): a group of another never applies
Arch = Literal["volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna3"]


class Band(Strict):
    """measured / predicted ratios at the 10th and 90th percentile, around the corrected prediction."""

    cases: Int = Field(ge=1, description="cases behind the spread (shipped held-out cases)")
    ratio_p10: Float = Field(gt=0, le=100)
    ratio_p90: Float = Field(gt=0, le=100)

    @model_validator(mode="after")
    def _ordered(self) -> Band:
        if self.ratio_p10 > self.ratio_p90:  # an inverted band put hours_p10 above hours_p90
            raise ValueError(f"ratio_p10 ({self.ratio_p10:g}) must not exceed ratio_p90 ({self.ratio_p90:g})")
        return self


class GroupFit(Strict):
    """A group's fitted factor, the data behind it and its band."""

    factor: Float = Field(gt=0, le=100, description="real / predicted (step time or peak memory)")
    n: Int = Field(ge=1, description="measurements in the group")
    mean_log_ratio: Float = Field(description="mean of log(real / predicted) before shrinkage")
    measurements: list[str] = Field(min_length=1, description="ids of the measurements used")
    band: Band | None = None


class TimeGroup(GroupFit):
    """Step-time correction for one (GPU architecture, engine, method, precision)."""

    arch: Arch
    engine: Engine
    method: Method
    precision: Precision

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(arch, engine, method, precision)."""
        return (self.arch, self.engine, self.method.value, self.precision.value)


class MemoryGroup(GroupFit):
    """Peak-memory correction for one (engine, method)."""

    engine: Engine
    method: Method

    @property
    def key(self) -> tuple[str, str]:
        """(engine, method)."""
        return (self.engine, self.method.value)


class Shrinkage(Strict):
    """The prior: ``prior_weight`` k pseudo-measurements at ratio 1; factors capped to [1/max_factor, max_factor]."""

    prior_weight: Float = Field(gt=0, le=1000)
    max_factor: Float = Field(gt=1, le=100)


class MeasurementRef(Strict):
    """One measurement the overlay was fitted on."""

    id: str
    file: str
    used: list[Literal["time", "memory"]]


class Overlay(Strict):
    """An overlay file (``ftopt calibrate -o FILE``)."""

    format: Literal["ftopt-calibration-overlay/1"]
    shrinkage: Shrinkage
    measurements: list[MeasurementRef]
    time: list[TimeGroup] = []
    memory: list[MemoryGroup] = []

    @model_validator(mode="after")
    def _groups_unique(self) -> Overlay:
        for name, groups in (("time", self.time), ("memory", self.memory)):
            keys = [g.key for g in groups]
            if len(set(keys)) != len(keys):
                raise ValueError(f"{name}: each group may appear once")
        return self


@dataclass(frozen=True)
class LoadedOverlay:
    """An overlay and the file it came from (plans name it)."""

    path: str
    overlay: Overlay

    def time_group(self, arch: str, engine: str, method: str, precision: str) -> TimeGroup | None:
        """The time group of a configuration, or None."""
        return next((g for g in self.overlay.time if g.key == (arch, engine, method, precision)), None)

    def memory_group(self, engine: str, method: str) -> MemoryGroup | None:
        """The memory group of a configuration, or None."""
        return next((g for g in self.overlay.memory if g.key == (engine, method)), None)


def load_overlay(path: str | Path, source: str = "", field: str = "calibration") -> LoadedOverlay:
    """Read and validate an overlay file; a missing file is an error naming ``source`` and ``field``."""
    p = Path(path)
    if not p.is_file():
        raise InputError(source or str(p), field, f"calibration overlay '{path}' not found (ftopt calibrate -o FILE)")
    return LoadedOverlay(str(p), validate(Overlay, read_yaml(p), str(p)))


def time_factors(loaded: LoadedOverlay, arch: np.ndarray, precision: np.ndarray, engine: str,
                 method: str) -> np.ndarray:  # fmt: skip
    """Per row f_t (1 outside every group); ``arch`` holds architecture names, ``precision`` PRECISION codes."""
    f = np.ones(arch.shape[0])
    for g in loaded.overlay.time:
        if g.engine == engine and g.method.value == method:
            f[(arch == g.arch) & (precision == PRECISION.index(g.precision))] = g.factor
    return f


def apply(loaded: LoadedOverlay, mem: dict[str, np.ndarray], time: dict[str, np.ndarray], arch: np.ndarray,
          precision: np.ndarray, engine: str, method: str, steps: int) -> tuple[dict, dict]:  # fmt: skip
    """The corrected memory parts and times (new dicts; see the module docstring for the formulas)."""
    return scale_memory(loaded, mem, engine, method), scale_time(loaded, time, arch, precision, engine, method, steps)


def scale_time(loaded: LoadedOverlay, time: dict[str, np.ndarray], arch: np.ndarray, precision: np.ndarray,
               engine: str, method: str, steps: int) -> dict[str, np.ndarray]:  # fmt: skip
    """The corrected times (a new dict): step x f_t, hours grown by the steps' extra seconds."""
    f_t = time_factors(loaded, arch, precision, engine, method)
    t = dict(time)
    step = time["step_seconds"]
    t["step_seconds"] = step * f_t
    t["tokens_per_second"] = time["tokens_per_second"] / f_t
    t["mfu"] = time["mfu"] / f_t
    t["hfu"] = time["hfu"] / f_t
    t["hours"] = time["hours"] + steps * step * (f_t - 1.0) / 3600.0
    return t


def scale_memory(loaded: LoadedOverlay, mem: dict[str, np.ndarray], engine: str, method: str) -> dict[str, np.ndarray]:
    """The corrected memory parts (a new dict): each GPU part x the group's factor, rounded to bytes."""
    group = loaded.memory_group(engine, method)
    if group is None:
        return dict(mem)
    return {k: v if k == "cpu_offload" else np.rint(v * group.factor).astype(v.dtype) for k, v in mem.items()}


def group_accuracy(accuracy: Mapping[str, Any], loaded: LoadedOverlay | None, time_group: TimeGroup | None,
                   memory_group: MemoryGroup | None) -> dict[str, Any]:  # fmt: skip
    """calibration.yaml ``accuracy`` with each model's band replaced by its group's band where the overlay has one.

    A band from the user's own measurements is a published run like the plan: the coverage map
    (``time_coverage`` or ``memory_coverage``, models/coverage.py) no longer widens it.
    """
    out = dict(accuracy)
    for name, group in (("time", time_group), ("memory", memory_group)):
        if loaded is not None and group is not None and group.band is not None and name in out:
            out[name] = {**out[name], **group.band.model_dump()}
            out.pop(f"{name}_coverage", None)
    return out


def usage(loaded: LoadedOverlay, time_group: TimeGroup | None, memory_group: MemoryGroup | None) -> dict[str, Any]:
    """What a plan reports about the overlay: the file, and per model the group, factor and measurements used."""

    def one(g: TimeGroup | MemoryGroup | None, keys: tuple[str, ...]) -> dict[str, Any] | None:
        if g is None:
            return None
        return {"group": dict(zip(keys, g.key, strict=True)), "factor": g.factor, "measurements": list(g.measurements)}

    return {
        "overlay": loaded.path,
        "time": one(time_group, ("arch", "engine", "method", "precision")),
        "memory": one(memory_group, ("engine", "method")),
    }
