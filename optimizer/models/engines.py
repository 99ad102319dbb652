"""What each training engine can run, as data (calibration.yaml ``frameworks``): checkpointing levels and offloading.

Engines: hf_deepspeed and hf_fsdp (the hf framework with its ``training.sharding``), torchtune, nemo. The solver
proposes only configurations the scenario's engine can launch; a pinned value is used as given (optimizer/space.py
``grid``). The sources of each entry are in calibration.yaml beside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from optimizer.catalog import Catalog
from optimizer.configs import Job
from optimizer.schema import Framework, Method, Offload, Precision, Scenario


def engine_key(scenario: Scenario, job: Job) -> str:
    """hf_deepspeed | hf_fsdp for the hf framework (by ``training.sharding``), else the framework name."""
    return f"hf_{scenario.training.sharding.value}" if job.framework is Framework.hf else job.framework.value


def checkpointing_levels(job: Job, catalog: Catalog) -> list[str] | None:
    """Activation-checkpointing levels the framework offers (``frameworks.checkpointing``); None: every level."""
    return catalog.calibration.get("frameworks", {}).get("checkpointing", {}).get(job.framework.value)


def half_precision_fallback(job: Job, catalog: Catalog) -> Precision:
    """The precision proposed on a GPU without native bf16 (``frameworks.no_bf16_precision``; default fp16)."""
    value = catalog.calibration.get("frameworks", {}).get("no_bf16_precision", {}).get(job.framework.value, "fp16")
    return Precision(value)


@dataclass(frozen=True)
class OffloadRule:
    """The offloading a scenario's engine can run.

    ``allowed``: whether at all (its optimizer must step on the CPU); ``pairs``: which (zero_stage, offload) pairs
    (None: every pair the grid has); ``min_dp``: the fewest data-parallel ranks it needs.
    """

    allowed: bool = True
    pairs: frozenset[tuple[int, str]] | None = None
    min_dp: int = 1

    def keeps(self, zero_stage: int, offload: Offload, dp: int) -> bool:
        """Whether the engine can run this offload (no offload is always kept)."""
        if offload is Offload.none:
            return True
        in_pairs = self.pairs is None or (zero_stage, offload.value) in self.pairs
        return self.allowed and in_pairs and dp >= self.min_dp


def offload_rule(scenario: Scenario, job: Job, catalog: Catalog) -> OffloadRule:
    """The engine's offload rule from calibration ``frameworks`` (keys hf_deepspeed | hf_fsdp | torchtune | nemo).

    ``offload_optimizers``: optimizers that can step on the CPU; ``offload_modes``: the (zero_stage, offload) pairs
    and, for full fine-tuning, the fewest data-parallel ranks (``full_min_dp``). An engine missing from either
    allows everything. A pinned offload is used as given (optimizer.space.grid).
    """
    key = engine_key(scenario, job)
    frameworks = catalog.calibration.get("frameworks", {})
    optimizers = frameworks.get("offload_optimizers", {}).get(key)
    optimizer = scenario.plan.optimizer or scenario.training.optimizer
    modes = frameworks.get("offload_modes", {}).get(key, {})
    pairs = modes.get("pairs")
    return OffloadRule(
        allowed=optimizers is None or optimizer.value in optimizers,
        pairs=None if pairs is None else frozenset((int(z), str(o)) for z, o in pairs),
        min_dp=int(modes.get("full_min_dp", 1)) if job.method is Method.full else 1,
    )
