"""Which published runs a plan resembles: the coverage map of the reference cases, and the band of plans outside it.

A plan's *cell* is the combination of the things that change the step-time model's error most (docs/time-model.md
section 4): GPU architecture, engine (hf_deepspeed, hf_fsdp, torchtune, nemo), method (full, lora, qlora), data
sharding (stage 0, stages 1-2, stage 3), offload (none, optimizer, all) and scale (one node or several, and whether
the GPUs of a node reach each other only through host memory: ``-no-p2p``). A cell is
*covered* when at least one scored reference throughput case lies in it. ``bench/loso.py --write`` stores the
covered cells in calibration.yaml ``accuracy.time_coverage.cells`` and the percentiles of the leave-one-source-out
ratios of the cases whose cell no OTHER source covers (``accuracy.time_coverage.uncovered``): how wrong the model
was, when it was, on a run unlike any it was fitted to. A plan outside the covered cells gets the wider of its own
band and that one (:func:`widest`), and its output says "no published run like this". The memory model has the same
map over its measured cases (``accuracy.memory_coverage``; the tail ratio_p99 widens too).

Without peer-to-peer (:func:`no_p2p_band`): ``accuracy.time_coverage.no_p2p`` holds the percentiles of the
leave-one-source-out ratios of every case whose scale is ``-no-p2p``, and a plan in such a cell gets the wider of
its band and that one, covered or not, and its output says so (:data:`NO_P2P`).

The worst run of a memory cell (:func:`memory_widened`): ``accuracy.memory_coverage.cell_high`` names, per cell, the
measured run that peaked furthest above its held-out prediction where that ratio is above the p90 of every case
(runs a source re-measured after fixing a start-up behaviour are left out: tests/data/reference/superseded.yaml). A
plan in such a cell has ratio_p90 and ratio_p99 at least that ratio, in its band and in the memory it is planned
at (space.memory_ratios), and its output says so (:data:`WORST_RUN`): the one run like it was that far over, so a
plan like it is not known to fit with less. PEFT's QLoRA 70B on 2 x 24 GB with FSDP CPU offload peaked 1.60x what
the model predicts for it without its source; a plan in its cell is planned at that.

Efficiency ceiling (the winner's curse, docs/time-model.md section 4): the solver is drawn to the plans the step-time
model is most optimistic about. ``accuracy.time_coverage.best_hfu`` holds, per covered cell and precision
(:func:`ceiling_key`), the highest hardware FLOPs utilisation any published run of them reached (model FLOPs
per token, recomputation included, x tokens/s per GPU / the GPU's dense peak in that precision; HFU rather than
MFU so that a plan without recomputation is compared fairly with runs that recompute, and per precision because
an fp8 run's share of the fp8 peak says nothing about a bf16 plan's share of the bf16 peak). There are no fp8
ceilings: fp8 recipes keep a recipe-dependent part of the work in bf16 (attention, the output layer, whatever the
recipe excludes), so a share of the fp8 peak compares recipes rather than efficiency. A plan predicted
above it is faster than any run like it was measured to be: the slow end of its time band is at least the time at
that efficiency, ratio_p90 >= hfu / best (:func:`ceiling_ratio`), and its output says so. The stored ratio_p90 of
each band counts a reference case its own ceiling (the other sources' best) already covers as predicted right
(ratio min(r, 1), bench/loso.py ``slow_end_ratio``), so the same error does not widen the slow end twice.

Only measured runs set a ceiling (derived rows that convert to 84-101% of the peak bound nothing).

The prediction itself is not capped, because the evidence is against a cap: under leave-one-source-out, 6 bf16
cases were predicted above the other sources' best measured run of their cell (llm-foundry MPT runs on 8 x H100),
and 5 of them ran at least as fast as predicted; capped, their errors would have gone from -20%..+7% to -32%..-8%
(``python bench/winners_curse.py --loso``). The ceiling is a statement of missing
evidence, a wider slow end, not a different centre.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

NO_RUN = ("no published run like this (GPU architecture, engine, method, dense or MoE, sharding, offload, nodes, "
          "peer-to-peer): band spans its group's and that of the held-out runs unlike every other source's")
NO_P2P = ("no peer-to-peer between the cards of a node (collectives through host memory): band widened to the "
          "published runs without it")
WORST_RUN = "a measured run like this peaked {ratio:.2f}x its prediction ({case}): band widened to it"
ABOVE_RUNS = ("predicted hardware FLOPs utilisation {hfu:.1%} is above every published run like this "
              "(best {best:.1%}): the slow end assumes only that efficiency")
ABOVE_ARCH = ("predicted hardware FLOPs utilisation {hfu:.1%} is above every published run on this GPU architecture "
              "(best {best:.1%}, any engine or method): the slow end assumes only that efficiency")


def sharding_class(zero_stage: int) -> str:
    """zero0 (replicated or model-parallel only), zero1-2 (optimizer / gradient sharding), zero3 (parameters too)."""
    return "zero0" if zero_stage <= 0 else ("zero1-2" if zero_stage <= 2 else "zero3")


def engine(framework: str, sharding: str) -> str:
    """The engine a cell names: ``hf_<sharding>`` (hf_deepspeed, hf_fsdp) for the hf framework, else the framework."""
    return f"hf_{sharding}" if framework == "hf" else framework


def staged(p2p: bool | np.ndarray, cards: int | np.ndarray, nodes: int | np.ndarray) -> bool | np.ndarray:
    """Whether the plan's ranks on a node exchange data through host memory; scalars or per-row arrays.

    Several GPUs per node without peer-to-peer (GeForce 40 cards, bridge-less consumer servers: the offer's ``p2p``,
    else the GPU's; hosts.p2p).
    """
    return np.logical_not(p2p) & (np.asarray(cards) > np.asarray(nodes))


def method_key(method: str, experts: int = 1) -> str:
    """The method part of a cell: ``lora``, or ``lora+moe`` for a mixture-of-experts model.

    An MoE block runs its experts as many small GEMMs behind a router (HF's Mixtral/Qwen-MoE loop over the experts,
    gathers and scatters of the tokens routed to each), so a dense run's efficiency says little about it, and no
    reference run is of an MoE model: its plans are outside every covered cell.
    """
    return f"{method}+moe" if experts > 1 else method


def cell(arch: str, engine: str, method: str, zero_stage: int, offload: str, nodes: int, no_p2p: bool = False) -> str:
    """The coverage cell of a plan, e.g. ``ampere/hf_fsdp/full/zero3/none/multi-node``.

    ``no_p2p`` (:func:`staged`) appends ``-no-p2p`` to the scale: a data-parallel run whose collectives go through
    host memory reaches a fraction of the efficiency of the same run over NVLink or PCIe peer-to-peer (torchtune's
    Llama-2-7B on 4 x RTX 4090 under FSDP: HFU 12%), so neither is "a run like" the other. The memory map's cells
    leave it out: peer-to-peer changes how fast the collectives run, not what a GPU holds.
    """
    scale = ("multi-node" if nodes > 1 else "one-node") + ("-no-p2p" if no_p2p else "")
    engine = "hf" if engine.startswith("hf_") and zero_stage <= 0 else engine  # no sharding: neither library runs
    return "/".join((arch, engine, method, sharding_class(zero_stage), offload, scale))


def widest(band: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    """The band that spans both: the lower 10th and the higher 90th and 99th percentile (median and cases of ``band``).

    ratio_p99 is widened only where both bands have it (the memory bands).
    """
    out = {**band, "ratio_p10": min(float(band["ratio_p10"]), float(other["ratio_p10"])),
           "ratio_p90": max(float(band["ratio_p90"]), float(other["ratio_p90"]))}  # fmt: skip
    if band.get("ratio_p99") is not None and other.get("ratio_p99") is not None:
        out["ratio_p99"] = max(float(band["ratio_p99"]), float(other["ratio_p99"]))
    return out


def no_p2p_band(accuracy: Mapping[str, Any], plan_cell: str | None) -> Mapping[str, Any] | None:
    """The band of the published runs without peer-to-peer for a plan staged through host memory, else None.

    ``accuracy.time_coverage.no_p2p``, for a plan whose cell has the scale ``-no-p2p`` (:func:`staged`); None for
    any other plan or without that band. Such a plan gets the wider of its own band and this one, whether or not
    its own cell is covered: of the thirteen runs on record of the regime, torchtune's Llama-2-7B FSDP rows on 2 and
    4 x RTX 4090 ran 1.77x and 1.93x the step time the model predicts for them without their source, and Answer.AI's
    eleven FSDP+QLoRA rows on 2 x RTX 4090 0.68x-1.15x (docs/time-model.md section 3): a spread wider than any
    group's band, so a plan in the regime is not known to better than that.
    """
    if plan_cell is None or not plan_cell.endswith("-no-p2p"):
        return None
    return (accuracy.get("time_coverage") or {}).get("no_p2p")


def widened(band: Mapping[str, Any], accuracy: Mapping[str, Any], plan_cell: str | None,
            outside: bool) -> Mapping[str, Any]:  # fmt: skip
    """``band`` widened as a plan's time band is (the plan band, the solver's slow end, the LOSO coverage count).

    To the uncovered cases' band when ``outside`` (no published run in the plan's cell; :func:`widest`), and to the
    band of the runs without peer-to-peer when the cell is staged through host memory (:func:`no_p2p_band`). Not
    widened, it is ``band`` itself.
    """
    if outside:
        band = widest(band, accuracy["time_coverage"]["uncovered"])
    regime = no_p2p_band(accuracy, plan_cell)
    return band if regime is None else widest(band, regime)


def cell_high(accuracy: Mapping[str, Any], plan_cell: str | None) -> Mapping[str, Any] | None:
    """The measured run of the plan's memory cell furthest above its prediction ({ratio, case}), else None.

    ``accuracy.memory_coverage.cell_high``: only cells whose worst run is above the p90 of every case are there.
    """
    if plan_cell is None:
        return None
    return ((accuracy.get("memory_coverage") or {}).get("cell_high") or {}).get(plan_cell)


def memory_widened(band: Mapping[str, Any], accuracy: Mapping[str, Any], plan_cell: str | None,
                   outside: bool) -> Mapping[str, Any]:  # fmt: skip
    """``band`` widened as a plan's memory band is (the plan band, the ratio the solver plans at).

    To the uncovered cases' band when ``outside`` (no measured run in the plan's cell; :func:`widest`), and with
    ratio_p90 and ratio_p99 raised to the ratio of the cell's worst run (:func:`cell_high`). Not widened, it is
    ``band`` itself.
    """
    if outside:
        band = widest(band, accuracy["memory_coverage"]["uncovered"])
    high = cell_high(accuracy, plan_cell)
    if high is None:
        return band
    return widest(band, {**band, "ratio_p90": high["ratio"], "ratio_p99": high["ratio"]})


def covered(accuracy: Mapping[str, Any], plan_cell: str | None, model: str = "time") -> bool | None:
    """Whether a published run lies in the plan's cell (``accuracy.<model>_coverage``, model time or memory).

    None when the calibration has no such coverage map.
    """
    cov = accuracy.get(f"{model}_coverage")
    if cov is None or plan_cell is None:
        return None
    return plan_cell in cov["cells"]


def ceiling_key(plan_cell: str, precision: str) -> str:
    """The key of ``accuracy.time_coverage.best_hfu``: the cell and the precision, e.g. ``.../one-node/bf16``."""
    return f"{plan_cell}/{precision}"


def best_hfu(accuracy: Mapping[str, Any], plan_cell: str | None, precision: str) -> float | None:
    """The highest HFU a published run of the plan's cell and precision reached (``time_coverage.best_hfu``).

    None when no such run exists or the calibration has no such figures.
    """
    cov = accuracy.get("time_coverage")
    if cov is None or plan_cell is None:
        return None
    best = (cov.get("best_hfu") or {}).get(ceiling_key(plan_cell, precision))
    return None if best is None else float(best)


def above_text(like: bool | None, hfu: float, best: float | None) -> str:
    """The winner's-curse line: above the runs of the plan's cell, or (none in it) of its GPU architecture."""
    return (ABOVE_RUNS if like else ABOVE_ARCH).format(hfu=hfu, best=best)


def best_hfu_on_arch(accuracy: Mapping[str, Any], plan_cell: str | None, precision: str) -> float | None:
    """The highest HFU any published run on the plan's GPU architecture reached in its precision, or None.

    The ceiling of a plan no published run is like (the winner's curse where nothing measured looks like the plan):
    the solver's favourite plans are those the model is most optimistic about, and outside every cell only the
    architecture's best run bounds that optimism (ampere bf16: 73.7%, llm-foundry under HF FSDP).
    """
    cov = accuracy.get("time_coverage")
    if cov is None or plan_cell is None:
        return None
    arch = plan_cell.split("/", 1)[0]
    values = [float(v) for k, v in (cov.get("best_hfu") or {}).items()
              if k.startswith(f"{arch}/") and k.endswith(f"/{precision}")]  # fmt: skip
    return max(values) if values else None


def hfu_ceiling(accuracy: Mapping[str, Any], plan_cell: str | None, precision: str) -> float | None:
    """The efficiency a plan's slow end is held to, or None.

    Its cell's best published HFU when a run lies in the cell, else the best on its GPU architecture
    (:func:`best_hfu_on_arch`).
    """
    if covered(accuracy, plan_cell):
        return best_hfu(accuracy, plan_cell, precision)
    return best_hfu_on_arch(accuracy, plan_cell, precision)


def ceiling_ratio(hfu: float, best: float | None) -> float:
    """Real / predicted compute time if the plan reaches only the cell's best published HFU.

    hfu / best when the prediction is above it, else 1 (module docstring).
    """
    return float(ceiling_ratios(np.array([hfu]), np.array([np.nan if best is None else best]))[0])


def ceiling_ratios(hfu: np.ndarray, best: np.ndarray) -> np.ndarray:
    """:func:`ceiling_ratio` per row, (n,); ``best`` NaN where the row's cell and precision have no figure.

    hfu / best rounded up to three decimals (as the stored ratios) where hfu > best > 0, else 1.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.ceil(hfu / best * 1000.0 - 1e-9) / 1000.0
    return np.where((best > 0.0) & (hfu > best), ratio, 1.0)
