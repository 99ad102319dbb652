"""Leave-one-source-out (LOSO) validation of the memory model over every measured reference case.

A source is the repository a case comes from (:func:`tests.memory_reference_cases.source_of`: pytorch/torchtune,
QwenLM/Qwen, huggingface/peft, hiyouga/LLaMA-Factory, pytorch/torchtitan, Lightning-AI/litgpt). For each source the
memory constants that are fitted to cases are fitted again on the measured cases of all the other sources, and the
left-out source's cases are scored with them. Every other constant is derived (counted from what the frameworks
allocate, docs/memory-model.md) and is the same in every fold.

Fitted constants (``FITTED``): ``context_bytes`` (the CUDA context, outside torch's counters: it enters only
nvidia-smi readings) and ``fragmentation`` (the caching allocator's reserve over what is allocated and freed every
micro-batch: it enters reserved and nvidia-smi readings). Both enter every prediction linearly, so one evaluation of
the cases at two settings gives each case's prediction for any pair (:func:`linear_terms`), and the fit is a grid
search over ``CONTEXT_GRID_GIB`` x ``FRAGMENTATION_GRID`` minimising median |error| + 0.1 x mean |error| (the
objective of the original fit, docs/memory-model.md section 5). Boundary cases (fits / OOM) are not scored here.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from optimizer.inputs.catalog import load_catalog
from tests.memory_reference_cases import UNIT_BYTES, CaseResult, evaluate_all

GIB = 2**30
FITTED = ("context_bytes", "fragmentation")
CONTEXT_GRID_GIB = np.round(np.arange(0.50, 1.001, 0.05), 2)  # formulas.md section 8 "C, context: 0.5-1 GB"
FRAGMENTATION_GRID = np.round(np.arange(0.0, 0.501, 0.01), 2)


@dataclass(frozen=True)
class LinearCase:
    """A measured case's prediction as a linear function of the fitted constants, in the case's unit:
    predicted = base + context_gib x per_context + fragmentation x per_fragmentation."""

    result: CaseResult  # the evaluation with the catalog's constants
    base: float  # prediction with context 0 and fragmentation 0
    per_context: float  # 1 GiB in the case's unit when the counter includes the context (nvidia-smi), else 0
    per_fragmentation: float  # the dynamic bytes the fragmentation multiplies, when the counter sees the reserve


def linear_terms(consts: dict | None = None) -> list[LinearCase]:
    """Every measured case as a :class:`LinearCase` (evaluated twice: fragmentation 0 and 1, context 0)."""
    base_consts = dict(consts if consts is not None else load_catalog().calibration["memory"])
    zero = evaluate_all({**base_consts, "context_bytes": 0, "fragmentation": 0.0})
    one = evaluate_all({**base_consts, "context_bytes": 0, "fragmentation": 1.0})
    actual = evaluate_all(base_consts)
    out = []
    for r0, r1, r in zip(zero, one, actual, strict=True):
        if r.bound is not None:
            continue
        per_context = GIB / UNIT_BYTES[r.unit] if r.metric == "nvidia-smi" else 0.0
        out.append(LinearCase(r, r0.predicted, per_context, r1.predicted - r0.predicted))
    return out


def _errors(cases: list[LinearCase], context_gib: np.ndarray, frag: np.ndarray) -> np.ndarray:
    """|error| of each case on the whole grid: shape (len(context_gib), len(frag), len(cases))."""
    base = np.array([c.base for c in cases])
    pc = np.array([c.per_context for c in cases])
    pf = np.array([c.per_fragmentation for c in cases])
    measured = np.array([c.result.measured for c in cases])
    pred = base + context_gib[:, None, None] * pc + frag[None, :, None] * pf
    return np.abs(pred / measured - 1.0)


def fit(cases: list[LinearCase]) -> dict[str, float]:
    """The grid point minimising median |error| + 0.1 x mean |error| over ``cases`` (ties: the first, that is the
    smallest context, then the smallest fragmentation): ``{"context_gib", "fragmentation"}``."""
    err = _errors(cases, CONTEXT_GRID_GIB, FRAGMENTATION_GRID)
    score = np.median(err, axis=2) + 0.1 * err.mean(axis=2)
    i, j = np.unravel_index(int(np.argmin(score)), score.shape)
    return {"context_gib": float(CONTEXT_GRID_GIB[i]), "fragmentation": float(FRAGMENTATION_GRID[j])}


def predict(case: LinearCase, constants: dict[str, float]) -> float:
    """The case's prediction (its unit) with the fitted ``constants``."""
    return case.base + constants["context_gib"] * case.per_context + constants["fragmentation"] * case.per_fragmentation


@dataclass(frozen=True)
class Fold:
    """One left-out source: the constants fitted without it and its cases' signed errors under them."""

    source: str
    constants: dict[str, float]
    errors: dict[str, float]  # case id -> (predicted - measured) / measured

    @property
    def median(self) -> float:
        """Median |error| of the source's cases."""
        return statistics.median(abs(e) for e in self.errors.values())

    @property
    def worst(self) -> float:
        """Largest |error| of the source's cases."""
        return max(abs(e) for e in self.errors.values())


def loso(cases: list[LinearCase] | None = None) -> list[Fold]:
    """One :class:`Fold` per source (sorted by name): fit on every other source, score the left-out one."""
    cases = cases if cases is not None else linear_terms()
    folds = []
    for source in sorted({c.result.source for c in cases}):
        constants = fit([c for c in cases if c.result.source != source])
        mine = [c for c in cases if c.result.source == source]
        errors = {c.result.id: predict(c, constants) / c.result.measured - 1.0 for c in mine}
        folds.append(Fold(source, constants, errors))
    return folds


def overall_median(folds: list[Fold]) -> float:
    """Median |error| over every case, each scored in the fold that left its source out."""
    return statistics.median(abs(e) for f in folds for e in f.errors.values())


def loso_ratios(folds: list[Fold]) -> list[float]:
    """measured / predicted of every case under leave-one-source-out (for uncertainty bands)."""
    return [1.0 / (1.0 + e) for f in folds for e in f.errors.values()]


def per_source_table(folds: list[Fold]) -> list[str]:
    """The markdown table of docs/memory-model.md section 5.1: one row per left-out source, then all cases."""
    rows = ["| left-out source | cases | context (GiB) | fragmentation | median abs error | worst abs error |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for f in folds:
        rows.append(f"| {f.source} | {len(f.errors)} | {f.constants['context_gib']:.2f} "
                    f"| {f.constants['fragmentation']:.2f} | {f.median:.1%} | {f.worst:.1%} |")  # fmt: skip
    n = sum(len(f.errors) for f in folds)
    rows.append(f"| **all (each case in its fold)** | {n} | | | {overall_median(folds):.1%} "
                f"| {max(f.worst for f in folds):.1%} |")  # fmt: skip
    return rows
