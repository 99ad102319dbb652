"""Fit a calibration overlay (optimizer/models/overlay.py) to a user's measurements (optimizer/inputs/measurement.py).

For each measurement the shipped models predict its pinned configuration (the code behind ``ftopt estimate``) and
the ratio real / predicted is taken:

- time: r_t = measured step seconds / predicted step seconds = predicted tokens/s / measured tokens/s (per GPU);
- memory: r_m = measured peak / predicted peak in the counter the measurement reports
  (optimizer/models/memory.py ``peak_for_metric``; an ``unknown`` counter is read as tests/memory_reference_cases.py
  reads it: torchtune allocated, or reserved for its GB-era tables; hf and nemo nvidia-smi).

Per group (time: GPU architecture x engine x method x precision; memory: engine x method) with n measurements
and mean log ratio m, the factor shrinks toward the shipped model (factor 1) with a prior worth k measurements:

    f = exp(clip(n m / (n + k), -ln c, +ln c))          k = prior_weight (default 1), c = max_factor (default 2)

so one measurement moves its group half-way (in log terms) toward itself, two measurements two thirds, and no set
of measurements moves a group by more than a factor c; a single measurement moves it by at most
min(sqrt(r), c) with k = 1. This is the posterior mean of a normal model for the group's log bias with the prior
at 0 and the prior's variance 1/k of one measurement's; its only property claimed here is that the group's sum of
squared log errors never grows: sum (x_i - w m)^2 = sum x_i^2 - (2w - w^2) n m^2 with 0 <= w <= 1.

Band of a calibrated group: the shipped held-out ratios (calibration.yaml ``accuracy``) pulled toward 1 in log terms
by s = sqrt(k / (n + k)), the ratio of the posterior to the prior standard deviation in the model above (a
heuristic for the spread that is left), widened where needed to the 10th-90th percentile of the group's own
leave-one-out residuals (each measurement against the factor fitted on the others; a lone measurement against its
own factor), which is how far a measurement of one configuration carries to another in that group.
Groups without measurements keep the shipped band.

Measurements that inform nothing are reported and skipped: those the catalog cannot evaluate (the error is shown;
when no measurement can be evaluated, the first one's error is raised and no overlay is written),
boundary observations (fits / oom), throughput given
only as model TFLOP/s (counting conventions differ) or wall minutes, CPU smoke runs (``environment.device: cpu``),
and figures more than 10x away from the prediction either way (OUTLIER: the scenario cannot describe the run;
the published cases are all within 2.5x).
"""

from __future__ import annotations

import math
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from optimizer.inputs.atomic import safe_name, write_atomic
from optimizer.inputs.catalog import builtin_offer_names, load_catalog, load_scenario, resolve_model, resolve_offer_file
from optimizer.inputs.errors import InputError
from optimizer.inputs.importers import read_measurements
from optimizer.inputs.measurement import UNIT_BYTES, Case
from optimizer.inputs.yamlio import validate_value
from optimizer.models.configs import PRECISION
from optimizer.models.engines import engine_key
from optimizer.models.memory import peak_for_metric
from optimizer.models.overlay import FORMAT, Band, MeasurementRef, MemoryGroup, Overlay, Shrinkage, TimeGroup
from optimizer.solve.planner import Overrides, estimate_space

DEFAULT_PRIOR_WEIGHT = 1.0
DEFAULT_MAX_FACTOR = 2.0
OUTLIER = 10.0  # a measurement off by more than this factor either way describes another configuration
UNKNOWN_METRIC = {"torchtune": "allocated", "hf": "nvidia-smi", "nemo": "nvidia-smi"}
UNKNOWN_METRIC_BY_UNIT = {("torchtune", "GB"): "reserved"}


@dataclass(frozen=True)
class Prediction:
    """The models' figures for one measurement's configuration, and its groups."""

    arch: str
    engine: str
    method: str
    precision: str
    framework: str
    step_seconds: float
    tokens_per_second_per_gpu: float
    peaks: dict[str, float]  # bytes per GPU by counter: allocated, reserved, nvidia-smi

    @property
    def time_key(self) -> tuple[str, str, str, str]:
        """(arch, engine, method, precision)."""
        return (self.arch, self.engine, self.method, self.precision)

    @property
    def memory_key(self) -> tuple[str, str]:
        """(engine, method)."""
        return (self.engine, self.method)


@dataclass
class Row:
    """One measurement and one model: measured, predicted before and after the overlay (``model`` time | memory)."""

    id: str
    file: str
    model: str
    group: str
    measured: float | None  # tokens/s per GPU (time) or bytes per GPU (memory)
    before: float | None
    after: float | None = None
    note: str = ""
    excluded: bool = False  # measured and predicted, but too far apart to be the same configuration

    @property
    def used(self) -> bool:
        """Whether the measurement entered the fit."""
        return self.measured is not None and self.before is not None and not self.excluded

    @staticmethod
    def error(predicted: float | None, measured: float | None) -> float | None:
        """The relative error predicted / measured - 1, or None."""
        return None if predicted is None or measured is None else predicted / measured - 1.0


@dataclass
class Result:
    """The fitted overlay and the per-measurement report."""

    overlay: Overlay
    rows: list[Row] = field(default_factory=list)

    @property
    def fitted(self) -> bool:
        """Whether some measurement was used: an overlay without a time or memory group changes nothing."""
        return bool(self.overlay.time or self.overlay.memory)


def predict(case: Case, workdir: Path, overlay_file: Path | None = None, label: str = "") -> Prediction:
    """Evaluate the case's pinned configuration with the shipped models (or through ``overlay_file``).

    Errors name ``label`` (the measurement file) and the case id rather than the temporary scenario file. The run
    is evaluated on the cards it ran on even where the catalog rents that GPU only as whole instances (one V100 of
    an 8-card machine is a measurement, not a rental).
    """
    doc = {k: v for k, v in case.scenario.items() if k != "calibration"}
    path = workdir / f"{safe_name(case.id)}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    ov = Overrides(calibration=str(overlay_file) if overlay_file else None)
    try:
        space, i = estimate_space(path, {}, ov, whole_instances=False)  # the cards it ran on, sold whole or not
    except InputError as exc:  # name the measurement, not the temporary file
        where = f"{case.id}: scenario.{exc.field}" if exc.field else f"{case.id}: scenario"
        raise InputError(label or case.id, where, exc.problem) from None
    c = space.cand
    row = {k: v[i : i + 1] for k, v in c.mem.items()}
    cards = float(c.cards[i])
    return Prediction(
        arch=space.gpus[int(c.offer_idx[i])].arch,
        engine=engine_key(space.scenario, space.job),
        method=space.job.method.value,
        precision=PRECISION[int(c.cfg.precision[i])].value,
        framework=space.job.framework.value,
        step_seconds=float(c.time["step_seconds"][i]),
        tokens_per_second_per_gpu=float(c.time["tokens_per_second"][i]) / cards,
        peaks={m: float(peak_for_metric(row, m)[0]) for m in ("allocated", "reserved", "nvidia-smi")},
    )


def time_pair(case: Case, pred: Prediction) -> tuple[float | None, float | None, str]:
    """(measured, predicted) tokens/s per GPU of a measurement, or Nones and the reason it is skipped."""
    m = case.measured
    if (case.environment or {}).get("device") == "cpu":
        return None, None, "not used: measured on the CPU (a probe --tiny smoke run)"
    if m.tokens_per_second_per_gpu is not None:
        return m.tokens_per_second_per_gpu, pred.tokens_per_second_per_gpu, ""
    if m.step_seconds is not None:  # same tokens per step: tokens/s scales as 1 / step seconds
        return pred.tokens_per_second_per_gpu * pred.step_seconds / m.step_seconds, pred.tokens_per_second_per_gpu, ""
    if m.model_tflops_per_gpu is not None or m.minutes is not None:
        return None, None, "not used: model TFLOP/s or wall minutes only (conventions and start-up differ)"
    return None, None, ""


def memory_pair(case: Case, pred: Prediction) -> tuple[float | None, float | None, str]:
    """(measured, predicted) peak bytes per GPU in the measurement's counter, or Nones and the reason."""
    m = case.measured
    peak = m.peak_bytes()
    if peak is None:
        return None, None, ""
    if case.kind == "boundary" or m.bound is not None:
        return None, None, "not used: a fits/oom boundary, not a peak"
    metric = m.metric or "unknown"
    if metric == "unknown":
        metric = UNKNOWN_METRIC_BY_UNIT.get((pred.framework, m.unit or ""), UNKNOWN_METRIC[pred.framework])
    return peak, pred.peaks[metric], ""


def _screen(row: Row) -> Row:
    """Exclude a row whose measured and predicted figures differ by more than OUTLIER either way."""
    if row.measured is None or row.before is None or 1 / OUTLIER <= row.before / row.measured <= OUTLIER:
        return row
    row.excluded = True
    row.note = (f"not used: predicted/measured = {row.before / row.measured:.3g}, beyond x{OUTLIER:g} either way; "
                "check that the scenario describes the run (GPU, cards, micro-batch, model)")
    return row


def _fit(logs: list[float], k: float, cap: float) -> float:
    """exp(clip(n mean / (n + k), +-ln cap)), rounded to 4 decimals (see the module docstring)."""
    n = len(logs)
    shrunk = n * (sum(logs) / n) / (n + k)
    return round(math.exp(max(-math.log(cap), min(math.log(cap), shrunk))), 4)


def _band(shipped: dict[str, Any] | None, n: int, k: float, residuals: list[float]) -> Band | None:
    """The shipped band pulled toward 1 by sqrt(k / (n + k)), widened to the group's own residual ratios.

    The own spread is the 10th-90th percentile of the log residuals (numpy's linear interpolation).
    """
    if not shipped:
        return None
    s = math.sqrt(k / (n + k))
    own = np.exp(np.quantile(np.asarray(residuals), [0.1, 0.9]))
    low = min(math.exp(s * math.log(float(shipped["ratio_p10"]))), float(own[0]))
    high = max(math.exp(s * math.log(float(shipped["ratio_p90"]))), float(own[1]))
    return Band(cases=int(shipped["cases"]), ratio_p10=round(low, 3), ratio_p90=round(high, 3))


def _group_label(key: tuple[str, ...]) -> str:
    return " x ".join(key)


def _groups(rows: list[tuple[Row, tuple[str, ...]]], k: float, cap: float, shipped: dict[str, Any] | None,
            ratio_of: Any) -> list[dict[str, Any]]:  # fmt: skip
    """Fitted group documents (key fields added by the caller) from the used rows."""
    by_key: dict[tuple[str, ...], list[Row]] = defaultdict(list)
    for row, key in rows:
        if row.used:
            by_key[key].append(row)
    out = []
    for key in sorted(by_key):
        members = by_key[key]
        logs = [math.log(ratio_of(r)) for r in members]
        factor = _fit(logs, k, cap)
        # each measurement against the factor fitted without it (in-sample when it is alone in its group)
        residuals = [x - math.log(_fit(logs[:i] + logs[i + 1 :], k, cap) if len(logs) > 1 else factor)
                     for i, x in enumerate(logs)]  # fmt: skip
        out.append({"key": key, "factor": factor, "n": len(logs), "mean_log_ratio": round(sum(logs) / len(logs), 6),
                    "measurements": [r.id for r in members],
                    "band": _band(shipped, len(logs), k, residuals)})  # fmt: skip
    return out


def none_usable(errors: list[InputError], measurements: int) -> None:
    """Raise the first measurement's error when the models could evaluate none of the ``measurements``.

    A measurement the models cannot evaluate (a pin no offer hosts, tp not dividing the heads) is reported and
    skipped while another one can be fitted; when every one of them is such an error the overlay would be empty and
    the report would bury the cause in a table cell, so the first error is the answer (bad input, nothing written).
    """
    if errors and len(errors) == measurements:
        raise errors[0]


def fit_overlay(cases: list[tuple[Case, str]], workdir: Path, k: float, cap: float) -> Result:
    """Predict every measurement, fit the time and memory groups, and return the overlay with the report rows."""
    time_rows: list[tuple[Row, tuple[str, ...]]] = []
    mem_rows: list[tuple[Row, tuple[str, ...]]] = []
    refs = []
    errors: list[InputError] = []
    for case, file in cases:
        try:
            pred = predict(case, workdir, label=file)
        except InputError as exc:  # e.g. more cards than any offer rents: reported, the others are still fitted
            errors.append(exc)
            time_rows.append((Row(case.id, file, "-", "-", None, None, note=f"not used: {exc}"), ("-",)))
            refs.append(MeasurementRef(id=case.id, file=file, used=[]))
            continue
        measured, before, note = time_pair(case, pred)
        row = _screen(Row(case.id, file, "time", _group_label(pred.time_key), measured, before, note=note))
        time_rows.append((row, pred.time_key))
        measured, before, note = memory_pair(case, pred)
        row = _screen(Row(case.id, file, "memory", _group_label(pred.memory_key), measured, before, note=note))
        mem_rows.append((row, pred.memory_key))
        used = [m for m, (r, _) in (("time", time_rows[-1]), ("memory", mem_rows[-1])) if r.used]
        refs.append(MeasurementRef(id=case.id, file=file, used=used))
    none_usable(errors, len(cases))
    accuracy = load_catalog().calibration.get("accuracy", {})
    # time: real / predicted step time = predicted / measured tokens/s; memory: measured / predicted peak
    tg = _groups(time_rows, k, cap, accuracy.get("time"), lambda r: r.before / r.measured)
    mg = _groups(mem_rows, k, cap, accuracy.get("memory"), lambda r: r.measured / r.before)
    overlay = Overlay(
        format=FORMAT,
        shrinkage=Shrinkage(prior_weight=k, max_factor=cap),
        measurements=refs,
        time=[TimeGroup(**dict(zip(("arch", "engine", "method", "precision"), g.pop("key"), strict=True)), **g)
              for g in tg],
        memory=[MemoryGroup(**dict(zip(("engine", "method"), g.pop("key"), strict=True)), **g) for g in mg],
    )  # fmt: skip
    return Result(overlay, [r for r, _ in time_rows + mem_rows if r.used or r.note])


def dump_overlay(overlay: Overlay) -> str:
    """The overlay file's text: a header comment and the YAML document (deterministic)."""
    doc = overlay.model_dump(mode="json", exclude_none=True)
    header = ("# ftopt calibration overlay, written by `ftopt calibrate`. Apply it with `--calibration FILE` or the\n"
              "# scenario key `calibration: FILE`. Factors are real / predicted "
              "(optimizer/models/overlay.py).\n")  # fmt: skip
    return header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def _after(result: Result, cases: list[tuple[Case, str]], workdir: Path) -> None:
    """Fill each used row's prediction through the fitted overlay (evaluated by the space, as plans will be)."""
    file = workdir / "overlay.yaml"
    file.write_text(dump_overlay(result.overlay), encoding="utf-8")
    by_id = {c.id: c for c, _ in cases}
    preds: dict[str, Prediction] = {}
    for row in result.rows:
        if not row.used:
            continue
        case = by_id[row.id]
        if row.id not in preds:
            preds[row.id] = predict(case, workdir, file, row.file)
        row.after = (time_pair if row.model == "time" else memory_pair)(case, preds[row.id])[1]


def scenario_document(path: str | Path) -> dict[str, Any]:
    """A scenario file as a self-contained measurement scenario: validated, model written inline, no overlay.

    ``training.sharding`` is written only where the file sets it (outside hf a set value is refused).
    """
    catalog = load_catalog()
    sc = load_scenario(path)
    arch = resolve_model(sc, catalog, path)
    doc = sc.model_dump(mode="json", exclude_none=True, exclude={"calibration"})
    if "sharding" not in sc.training.model_fields_set:  # left out, as the file has it: set, nemo would refuse it
        doc["training"].pop("sharding", None)
    doc["model"] = arch.model_dump(mode="json", exclude_none=True)
    if sc.catalog is not None:  # offer files by absolute path, so the document works from any folder
        names = [sc.catalog] if isinstance(sc.catalog, str) else sc.catalog
        doc["catalog"] = [n if n in builtin_offer_names() else
                          str(resolve_offer_file(n, str(path), "catalog", Path(path).parent).resolve()) for n in names]
    return doc


def collect(files: list[str], scenario: str | None) -> list[tuple[Case, str]]:
    """Every measurement of ``files`` (logs imported with the ``scenario`` file's pinned plan); ids unique."""
    doc = scenario_document(scenario) if scenario is not None else None
    out: list[tuple[Case, str]] = []
    seen: dict[str, str] = {}
    for f in files:
        for case in read_measurements(f, doc, scenario or "--scenario"):
            if case.id in seen:
                raise InputError(f, "id", f"measurement id '{case.id}' also in {seen[case.id]}; ids must be unique")
            seen[case.id] = f
            out.append((case, f))
    if not out:
        raise InputError(", ".join(files) or "ftopt calibrate", "", "no measurements given")
    return out


def calibrate(files: list[str], scenario: str | None = None, prior_weight: float = DEFAULT_PRIOR_WEIGHT,
              max_factor: float = DEFAULT_MAX_FACTOR, output: str | Path | None = None) -> Result:  # fmt: skip
    """Read the measurements, fit the overlay, re-predict through it, and write it to ``output`` (atomically).

    Nothing is written when no measurement was usable (:attr:`Result.fitted`): the rows say why each was not.
    """
    for name, value in (("prior_weight", prior_weight), ("max_factor", max_factor)):  # named as the options are
        validate_value(Shrinkage, name, value, "ftopt calibrate", "--" + name.replace("_", "-"))
    cases = collect(files, scenario)
    with tempfile.TemporaryDirectory(prefix="ftopt-calibrate-") as tmp:
        result = fit_overlay(cases, Path(tmp), prior_weight, max_factor)
        _after(result, cases, Path(tmp))
    if output is not None and result.fitted:
        write_atomic(output, dump_overlay(result.overlay))
    return result


def unit_of(row: Row) -> tuple[float, str]:
    """Divisor and unit to show a row's figures: tokens/s per GPU, or GiB."""
    return (1.0, "tok/s/GPU") if row.model == "time" else (UNIT_BYTES["GiB"], "GiB")
