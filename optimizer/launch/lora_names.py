"""The LoRA targets a launch file names for the scenario's model: Linear modules, and the MoE experts' parameters.

A scenario names its targets by the Llama projections. A dense model has Linear modules of those names; the routed
experts of transformers 5's MoE families (Mixtral, Qwen2-MoE, Qwen3-MoE) are two 3-D parameters per block instead,
which PEFT adapts through ``target_parameters``: ``target_modules: [gate_proj, up_proj, down_proj]`` leaves every
Mixtral expert without an adapter. The names per family, and why none of them can reach the router, are data in
catalogs/lora_targets.yaml (sources there). Checked against transformers 5.24 + peft 0.21.2 (HF export), 5.16.1 +
0.20.0 (Axolotl) and 5.6.0 + 0.18.1 (LLaMA-Factory) on tiny models built from their configs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import Field

from optimizer.inputs.catalog import CATALOG_DIR
from optimizer.inputs.schema import Framework, Method, ModelArch, Scenario, Strict
from optimizer.inputs.yamlio import read_yaml, validate

TABLE_FILE = CATALOG_DIR / "lora_targets.yaml"
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
ALL_LINEAR = "all-linear"


class Family(Strict):
    """One MoE family's names in the checked transformers (catalogs/lora_targets.yaml header)."""

    experts: dict[str, str] = Field(min_length=1)
    router: str
    peft_renames: tuple[str, ...] = ()
    source: str


class Table(Strict):
    """catalogs/lora_targets.yaml."""

    schema_version: int
    default_family: str
    families: dict[str, Family]


@dataclass(frozen=True)
class LoraNames:
    """What a PEFT LoraConfig names: ``modules`` (target_modules, or ``all-linear``) and ``parameters``.

    ``parameters`` (target_parameters) are the routed experts' fused weights, empty for a dense model; ``notes`` say
    where the names cannot adapt what the scenario asked.
    """

    modules: list[str] | str
    parameters: list[str]
    notes: tuple[str, ...] = ()


@lru_cache(maxsize=1)
def table() -> Table:
    """The families of catalogs/lora_targets.yaml, validated."""
    return validate(Table, read_yaml(TABLE_FILE), str(TABLE_FILE))


def family(arch: ModelArch | None) -> Family | None:
    """The MoE family of ``arch`` by its HF model_type (else the table's default), None for a dense model."""
    if arch is None or arch.moe_layers == 0:
        return None
    t = table()
    return t.families.get(arch.model_type or "", t.families[t.default_family])


def peft_matches(key: str, target: str) -> bool:
    """PEFT's name rule for target_modules and target_parameters: the full name, or a "."-suffix of it."""
    return key == target or key.endswith("." + target)


def scenario_targets(scenario: Scenario) -> list[str]:
    """The scenario's LoRA targets as written (empty for full fine-tuning)."""
    spec = scenario.lora_spec
    return [] if scenario.method is Method.full or spec is None else [str(t) for t in spec.targets]


def lora_names(scenario: Scenario, arch: ModelArch | None = None) -> LoraNames:
    """The target_modules and target_parameters for the scenario's LoRA targets on ``arch``.

    Dense (or ``arch`` unknown): the scenario's names, ``all-linear`` kept when it is the only one; with more names
    beside it (``[all-linear, lm_head]``) the projections written out plus those names, since PEFT's all-linear
    leaves the output layer out (peft tuners_utils.py _maybe_include_all_linear_layers) and the plan prices its
    adapter. MoE: the attention names asked
    (all-linear: q, k, v, o; written out, since PEFT >= 0.20 turns all-linear on these models into the router and
    the experts at twice the rank, and PEFT 0.18 into the attention alone), the MLP names asked only where Linear
    MLPs exist besides the routed experts (shared experts, dense blocks), lm_head if asked, and the family's expert
    parameters for the MLP names asked.
    """
    asked = scenario_targets(scenario)
    fam = family(arch)
    if fam is None:
        if asked == [ALL_LINEAR]:
            return LoraNames(ALL_LINEAR, [])
        return LoraNames(expand_all_linear(asked), [])
    assert arch is not None  # family() is None without an architecture
    every = ALL_LINEAR in asked
    wanted = [*ATTENTION, *MLP, *(t for t in asked if t == "lm_head")] if every else asked
    mlp = [t for t in wanted if t in MLP]
    linear_mlps = arch.layers > arch.moe_layers or arch.shared_experts > 0  # dense blocks or shared experts
    modules = [t for t in wanted if t not in MLP or linear_mlps]
    parameters = list(dict.fromkeys(fam.experts[t] for t in mlp if t in fam.experts))
    return LoraNames(modules, parameters, moe_notes(mlp, modules, fam))


def expand_all_linear(asked: list[str]) -> list[str]:
    """The targets with ``all-linear`` written out as the attention and MLP projections, the others kept, in order."""
    out: list[str] = []
    for t in asked:
        out += [*ATTENTION, *MLP] if t == ALL_LINEAR else [t]
    return list(dict.fromkeys(out))


def moe_notes(mlp: list[str], modules: list[str], fam: Family) -> tuple[str, ...]:
    """Where the experts' fused weight or PEFT's renaming adapts other than the scenario's MLP targets."""
    notes = []
    gate_up = fam.experts.get("gate_proj")
    if gate_up is not None and gate_up == fam.experts.get("up_proj") and len({"gate_proj", "up_proj"} & set(mlp)) == 1:
        notes.append(f"LoRA: the routed experts' gate and up projections are one fused weight ({gate_up}): "
                     "adapting one adapts both, as the plan prices it")  # fmt: skip
    renamed = [t for t in modules if t in fam.peft_renames]
    if renamed:
        notes.append(f"LoRA: PEFT >= 0.20 moves {', '.join(renamed)} from target_modules onto the routed experts at "
                     "twice the rank: the dense blocks' MLPs get no adapter and the experts more than the plan "
                     "priced")  # fmt: skip
    return tuple(notes)


LLAMAFACTORY_EXPERTS = (
    "llamafactory.yaml: lora_target names Linear modules only (LLaMA-Factory 0.9.5 hands it to PEFT's "
    "target_modules), and this model's routed experts are parameters ({params}): LLaMA-Factory adapts {modules} "
    "and no expert, fewer adapters than the plan priced; launch.yaml's lora_config and axolotl.yaml adapt them"
)


def llamafactory_notes(names: LoraNames) -> list[str]:
    """The experts' adapters that llamafactory.yaml cannot ask for (it has no target_parameters key)."""
    if not names.parameters:
        return []
    modules = ", ".join(names.modules) if isinstance(names.modules, list) else names.modules
    return [LLAMAFACTORY_EXPERTS.format(params=", ".join(names.parameters), modules=modules or "nothing")]


def expert_dropout_problem(scenario: Scenario, arch: ModelArch | None) -> str | None:
    """Why an hf plan cannot adapt the experts with ``lora.dropout`` > 0, else None.

    PEFT adapts target_parameters through ``lora.ParamWrapper``, which raises "does not work with lora_dropout != 0"
    (peft 0.18.1, 0.20.0, 0.21.2; Axolotl 0.19 refuses such a config too); NeMo's adapters take dropout.
    """
    spec = scenario.lora_spec
    if scenario.training.framework is not Framework.hf or spec is None or spec.dropout == 0:
        return None
    if not lora_names(scenario, arch).parameters:
        return None
    return (f"{spec.dropout:g}: PEFT adapts this mixture-of-experts model's routed experts as parameters "
            "(target_parameters), which take no dropout: allowed: 0, or targets without gate_proj, up_proj, "
            "down_proj")  # fmt: skip


def lora_config_targets(names: LoraNames) -> dict[str, Any]:
    """The LoraConfig keywords: target_modules, and target_parameters when the experts have any."""
    keys: dict[str, Any] = {"target_modules": names.modules}
    if names.parameters:
        keys["target_parameters"] = list(names.parameters)
    return keys
