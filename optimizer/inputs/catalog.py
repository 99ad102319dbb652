"""Load and validate the catalogs (GPUs, offers, models, exchange rates, calibration) and scenarios.

Built-in data lives in the repository's ``catalogs/`` folder, which an installed wheel carries as the package
``optimizer.catalogs``; a scenario names built-in offer files by name (``catalog: cn``) and its own by path. Names
are matched case-insensitively, GPU aliases included; an unknown name is an error with the nearest names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Any

from optimizer.inputs.errors import InputError, did_you_mean
from optimizer.inputs.inputfile import MAX_JSON_BYTES, read_json
from optimizer.inputs.schema import HfConfigRef, Method, ModelArch, Scenario, printable_name
from optimizer.inputs.schema_catalog import Accuracy, FxFile, FxRate, Gpu, GpuFile, ModelFile, Offer, OfferFile
from optimizer.inputs.yamlio import read_file_bytes, read_yaml, validate

# package folder: one level up from optimizer/<subpackage>/
_PACKAGE_DIR = Path(__file__).resolve().parent.parent
# An installed wheel holds the data as optimizer/catalogs; a source checkout (or an editable install) keeps it at the
# top of the repository.
CATALOG_DIR = _PACKAGE_DIR / "catalogs" if (_PACKAGE_DIR / "catalogs").is_dir() else _PACKAGE_DIR.parent / "catalogs"


@dataclass(frozen=True)
class Catalog:
    """Everything that can be rented and the constants the models use."""

    gpus: dict[str, Gpu]  # canonical id -> spec
    offers: list[Offer]  # in file order, ids unique
    models: dict[str, ModelArch]  # lower-case name -> architecture
    fx: list[FxRate]
    calibration: dict[str, Any]
    offer_files: tuple[str, ...] = ()
    _gpu_names: dict[str, str] = field(default_factory=dict)  # lower-case id or alias -> canonical id

    def gpu_id(self, name: str, source: str = "", where: str = "gpu") -> str:
        """Canonical id of a GPU name or alias (case-insensitive); InputError when unknown."""
        found = self._gpu_names.get(str(name).lower())
        if found is None:
            ids = sorted(self.gpus)
            raise InputError(
                source or "catalog", where, f"unknown GPU '{name}'{did_you_mean(name, ids)}; known: {', '.join(ids)}"
            )
        return found

    def model(self, name: str, source: str = "", where: str = "model") -> ModelArch:
        """Architecture of a catalog model (case-insensitive)."""
        found = self.models.get(str(name).lower())
        if found is None:
            names = sorted(m.name for m in self.models.values())
            raise InputError(
                source or "catalog",
                where,
                f"unknown model '{name}'{did_you_mean(name, names)}; known: {', '.join(names)} (a name ending in "
                f"{', '.join(MODEL_VARIANT_SUFFIXES)} is read as its base), or give an inline architecture or "
                "{hf_config: path}",
            )
        return found

    def rate(self, base: str, quote: str) -> FxRate | None:
        """Exchange rate base->quote (inverting a stored quote->base), or None when the catalog has none."""
        if base == quote:
            return FxRate(base=base, quote=quote, rate=1.0, source="identity", as_of=date(1970, 1, 1))
        for r in self.fx:
            if r.base == base and r.quote == quote:
                return r
            if r.base == quote and r.quote == base:
                return FxRate(base=base, quote=quote, rate=1.0 / r.rate, source=r.source, as_of=r.as_of)
        return None


def default_offer_files() -> list[Path]:
    """Every built-in offers file, sorted by name."""
    return sorted((CATALOG_DIR / "offers").glob("*.yaml"))


def _load_gpus(path: Path, data: bytes | None = None) -> dict[str, Gpu]:
    doc = validate(GpuFile, read_yaml(path, data), str(path))
    gpus: dict[str, Gpu] = {}
    for i, gpu in enumerate(doc.gpus):
        if gpu.id in gpus:
            raise InputError(str(path), f"gpus[{i}].id", f"duplicate GPU id '{gpu.id}'")
        gpus[gpu.id] = gpu
    return gpus


USABLE_SLACK = 1.1  # usable memory may exceed memory_gib x 1024 by this much (schema_catalog.Gpu's own check)


def _gpu_name_index(gpus: dict[str, Gpu]) -> dict[str, str]:
    names: dict[str, str] = {}
    for gpu in gpus.values():
        for name in [gpu.id, *gpu.aliases]:
            names.setdefault(name.lower(), gpu.id)
    return names


def _load_offers(paths: list[Path], gpu_names: dict[str, str], gpus: dict[str, Gpu],
                 data: dict[str, bytes | None] | None = None) -> list[Offer]:  # fmt: skip
    """The offers of ``paths``; rule: an offer id appears once across these files."""
    offers: list[Offer] = []
    seen: dict[str, str] = {}
    for path in paths:
        doc = validate(OfferFile, read_yaml(path, (data or {}).get(str(path))), str(path))
        for i, raw in enumerate(doc.offers):
            if not isinstance(raw, dict):
                raise InputError(str(path), f"offers[{i}]", "expected a mapping")
            if "currency" in raw:
                raise InputError(str(path), f"offers[{i}].currency", "set the currency once, at the top of the file")
            offer = validate(Offer, {**raw, "currency": doc.currency}, str(path), f"offers[{i}].")
            gpu = gpu_names.get(offer.gpu.lower())
            if gpu is None:
                raise InputError(
                    str(path), f"offers[{i}].gpu", f"unknown GPU '{offer.gpu}'{did_you_mean(offer.gpu, sorted(gpus))}"
                )
            card_mib = gpus[gpu].memory_gib * 1024
            if offer.usable_memory_mib is not None and offer.usable_memory_mib > card_mib * USABLE_SLACK:
                # what a process sees cannot exceed the card (the slack, as gpus.yaml's own check, for GB-vs-GiB
                # datasheets): 200,000 MiB on an H100 planned 195 GiB per card
                raise InputError(str(path), f"offers[{i}].usable_memory_mib", f"{offer.usable_memory_mib:,g} MiB is "
                                 f"more than a {gpu} holds ({gpus[gpu].memory_gib:g} GiB = {card_mib:,.0f} MiB): "
                                 f"allowed: at most {card_mib * USABLE_SLACK:,.0f}")  # fmt: skip
            if offer.id in seen:
                raise InputError(str(path), f"offers[{i}].id", f"duplicate offer id '{offer.id}' (also in "
                                 f"{seen[offer.id]}): allowed: an id no other offer uses, built-in ones "
                                 "included")  # fmt: skip
            seen[offer.id] = str(path)
            offers.append(offer.model_copy(update={"gpu": gpu}))
    if not offers:
        raise InputError(", ".join(map(str, paths)) or "catalogs/offers", "offers", "no offers to choose from")
    return offers


def _load_models(path: Path, data: bytes | None = None) -> dict[str, ModelArch]:
    doc = validate(ModelFile, read_yaml(path, data), str(path))
    return {m.name.lower(): m for m in doc.models}


@lru_cache(maxsize=8)
def _load_cached(snapshot: tuple[tuple[str, bytes | None], ...], offer_files: tuple[str, ...], root: str) -> Catalog:
    """The catalog of the files' contents in ``snapshot`` ((path, bytes or None when absent) of every file read)."""
    data = dict(snapshot)
    base = Path(root)
    gpus = _load_gpus(base / "gpus.yaml", data[str(base / "gpus.yaml")])
    names = _gpu_name_index(gpus)
    offers = _load_offers([Path(p) for p in offer_files], names, gpus, data)
    fx_path = base / "fx.yaml"
    fx_data = data[str(fx_path)]
    fx = validate(FxFile, read_yaml(fx_path, fx_data), str(fx_path)).rates if fx_data is not None else []
    cal_path = base / "calibration.yaml"
    cal_data = data[str(cal_path)]
    calibration = read_yaml(cal_path, cal_data) if cal_data is not None else {}
    if isinstance(calibration, dict) and "accuracy" in calibration:
        accuracy = validate(Accuracy, calibration["accuracy"], str(cal_path), "accuracy.")
        calibration = {**calibration, "accuracy": accuracy.model_dump(exclude_none=True)}
    return Catalog(
        gpus=gpus,
        offers=offers,
        models=_load_models(base / "models.yaml", data[str(base / "models.yaml")]),
        fx=list(fx),
        calibration=calibration or {},
        offer_files=offer_files,
        _gpu_names=names,
    )


def load_catalog(offer_files: list[str | Path] | None = None, root: Path = CATALOG_DIR) -> Catalog:
    """Load gpus.yaml, models.yaml, fx.yaml, calibration.yaml from ``root`` and the given offers files.

    Loading is cached per process by the files' contents (every file is read, parsing is what the cache saves), so
    batch workers parse each catalog once and an edited file is parsed again.
    """
    files = [resolve_offer_file(p, str(p), "catalog") for p in offer_files] if offer_files else default_offer_files()
    base = Path(root)
    optional = (base / "fx.yaml", base / "calibration.yaml")
    snapshot = tuple((str(p), read_file_bytes(p) if p not in optional or p.exists() else None)
                     for p in (base / "gpus.yaml", *files, *optional, base / "models.yaml"))  # fmt: skip
    return _load_cached(snapshot, tuple(str(f) for f in files), str(root))


def builtin_offer_ids(skip: Iterable[Path] = ()) -> dict[str, str]:
    """Offer id -> its built-in offers file, over the built-in files other than ``skip`` (compared resolved)."""
    left_out = {Path(p).resolve() for p in skip}
    files = [f for f in default_offer_files() if f.resolve() not in left_out]
    return {o["id"]: str(f) for f in files for o in read_yaml(f)["offers"]}


def builtin_offer_names() -> list[str]:
    """Names of the built-in offer files (``cn``, ``us``, ...), usable as ``catalog: NAME`` from any directory."""
    return [p.stem for p in default_offer_files()]


def builtin_offer_catalogs() -> dict[str, str]:
    """Offer id -> the name of the built-in offers file that holds it (``aws-p5-h100`` -> ``us``)."""
    return {offer_id: Path(path).stem for offer_id, path in builtin_offer_ids().items()}


def is_builtin_offer_name(name: str | Path) -> bool:
    """Whether ``name`` is a built-in catalog's name (``cn``), as :func:`resolve_offer_file` reads it."""
    text = str(name)
    plain = "/" not in text and "\\" not in text and not text.endswith((".yaml", ".yml"))
    return plain and (CATALOG_DIR / "offers" / f"{text}.yaml").is_file()


def resolve_offer_file(name: str | Path, source: str, where: str, base: Path | None = None) -> Path:
    """One offers file named by a user: a built-in name (``cn``), or a path.

    Rule: a relative path is tried against ``base`` (the folder of the scenario or portfolio that names it) first,
    then the working directory, then the ftopt data folder's parent, so that a scenario picks the same file from
    any directory, and ``catalogs/offers/cn.yaml`` works from any directory and from an installed wheel. Without
    ``base`` (a command-line flag) the working directory comes first.
    """
    text = str(name)
    if is_builtin_offer_name(text):
        return CATALOG_DIR / "offers" / f"{text}.yaml"
    p = Path(text)
    if not p.is_absolute():
        bases = ([base] if base is not None else []) + [Path(), CATALOG_DIR.parent]
        p = next((b / p for b in bases if (b / p).exists()), p)
    if not p.exists():
        raise InputError(source, where, f"catalog file '{name}' not found; built-in catalogs: "
                         f"{', '.join(builtin_offer_names())}, or give the path of an offers YAML file")  # fmt: skip
    if p.is_dir():
        raise InputError(source, where, f"'{name}' is a directory, expected a built-in catalog name "
                         f"({', '.join(builtin_offer_names())}) or an offers YAML file")  # fmt: skip
    return p


def named_file(name: str | Path, scenario_path: str | Path | None) -> Path:
    """A file a scenario names (``calibration:``, ``model: {hf_config: ...}``), as the solve opens it.

    Rule: an absolute path is taken as given; a relative one is relative to the scenario's folder when it exists
    there, else to the working directory when it exists there, else (to be reported missing) to the scenario's
    folder. Existence is not checked here: the reader reports it.
    """
    p = Path(name)
    if p.is_absolute() or scenario_path is None:
        return p
    beside = Path(scenario_path).parent / p
    return p if p.exists() and not beside.exists() else beside


def scenario_offer_files(scenario: Scenario, scenario_path: str | Path | None) -> list[Path] | None:
    """The offer files a scenario names (built-in names or paths, see ``resolve_offer_file``)."""
    if scenario.catalog is None:
        return None
    names = [scenario.catalog] if isinstance(scenario.catalog, str) else scenario.catalog
    base = Path(scenario_path).parent if scenario_path is not None else None
    return unique_files([resolve_offer_file(n, str(scenario_path or "scenario"), "catalog", base) for n in names])


def unique_files(paths: list[Path]) -> list[Path]:
    """The files in order, each once (by resolved path): naming a file twice is not two catalogs of the same ids."""
    seen: set[Path] = set()
    out = []
    for p in paths:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; the name defaults to the file's stem."""
    scenario = validate(Scenario, read_yaml(path), str(path))
    problem = method_bits_problem(scenario)
    if problem is not None:
        raise InputError(str(path), "training.base_bits", problem)
    if scenario.risk_limits and scenario.risk.value == "p99":  # the time model's bands stop at p90
        raise InputError(str(path), "risk_limits", "risk p99 is memory only (the time model has no p99 band): "
                         "allowed: risk p50 or p90 with risk_limits, or risk_limits false")  # fmt: skip
    if scenario.name is None:  # the file's stem, held to the rule of a name the file sets (schema.printable_name)
        try:
            stem = printable_name(Path(path).stem)
        except ValueError as exc:
            raise InputError(str(path), "name", f"the file name names the scenario (the file sets no name:): {exc}; "
                             "or set name:") from None  # fmt: skip
        scenario = scenario.model_copy(update={"name": stem})
    return scenario


def method_bits_problem(scenario: Scenario) -> str | None:
    """What contradicts ``method`` in ``training.base_bits``, else None.

    Full fine-tuning trains the 16-bit weights themselves (a k-bit base is frozen by definition); QLoRA is LoRA over
    a quantised base (4 or 8 bits). LoRA over an 8- or 4-bit base is allowed (bitsandbytes load_in_8bit/4bit).
    """
    bits = scenario.training.base_bits
    if bits is None:
        return None
    if scenario.method is Method.full and bits != 16:
        return (f"{bits}-bit: full fine-tuning trains the 16-bit weights themselves: allowed: 16 or leave it out "
                "(method: qlora trains adapters over a quantised base)")  # fmt: skip
    if scenario.method is Method.qlora and bits == 16:
        return "16-bit: qlora quantises the frozen base: allowed: 4 or 8 (method: lora trains over a 16-bit base)"
    return None


# config.json model_type values whose decoder blocks are the Llama-style shape ModelArch describes (q/k/v/o
# projections, a SwiGLU MLP, RMSNorm; MoE for the *_moe / mixtral types): transformers' modeling_<type>.py files
HF_MODEL_TYPES = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma",
                            "gemma2", "gemma3_text", "phi3", "olmo2", "granite"})  # fmt: skip
# model types whose transformers config class defaults tie_word_embeddings to True (GemmaConfig, Gemma2Config,
# Gemma3TextConfig; LlamaConfig, MistralConfig, MixtralConfig, Qwen2/Qwen3(-MoE), Phi3, Olmo2 and Granite default to
# False): read from transformers 5.24.0, each class built with its defaults, 2026-12-05
TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3_text"})
# name endings of instruction-tuned, chat and format variants that keep their base model's architecture
MODEL_VARIANT_SUFFIXES = ("-instruct", "-chat", "-base", "-it", "-hf", "-sft")
PARAM_TOLERANCE = 0.03  # a computed parameter count this far from the published one is worth a warning

_HF_KEYS = {
    "layers": "num_hidden_layers",
    "hidden": "hidden_size",
    "intermediate": "intermediate_size",
    "heads": "num_attention_heads",
    "vocab": "vocab_size",
}


def config_dtype(cfg: Any) -> str | None:
    """The published weights' dtype of a config.json, or None when it names none of bfloat16, float16, float32.

    ``dtype`` (transformers >= 4.56 writes it), else ``torch_dtype`` (earlier releases).
    """
    for key in ("dtype", "torch_dtype"):
        value = cfg.get(key) if isinstance(cfg, dict) else None
        if value in ("bfloat16", "float16", "float32"):
            return str(value)
    return None


def import_hf_config(path: str | Path, source: str = "") -> ModelArch:
    """Build an architecture from a local HF ``config.json`` (Llama, Mistral, Qwen2, Mixtral families)."""
    p = Path(path)
    label = source or str(p)
    if p.is_dir():
        raise InputError(label, "model.hf_config", f"'{path}' is a directory, expected a config.json file")
    if not p.is_file():
        raise InputError(label, "model.hf_config", f"config file '{path}' not found")
    cfg = read_json(p, str(p), MAX_JSON_BYTES, "an HF config.json")  # README "Input limits": a JSON file 16 MiB
    if not isinstance(cfg, dict):
        raise InputError(str(p), "", "expected a JSON object")
    missing = [hf for hf in _HF_KEYS.values() if hf not in cfg]
    if missing:
        raise InputError(str(p), missing[0], "required key missing from config.json")
    arch = {ours: cfg[hf] for ours, hf in _HF_KEYS.items()}
    arch["kv_heads"] = cfg.get("num_key_value_heads", arch["heads"])
    # a config.json that leaves tie_word_embeddings out takes its config class's default (Google's Gemma-2 configs)
    arch["tied_embeddings"] = bool(cfg.get("tie_word_embeddings", cfg.get("model_type") in TIED_BY_DEFAULT))
    moe, keys = moe_fields(cfg, str(p))
    arch.update(moe)
    arch["qkv_bias"] = cfg.get("model_type") in {"qwen2", "qwen2_moe"} or bool(cfg.get("attention_bias", False))
    arch["name"] = cfg.get("_name_or_path") or p.parent.name or "hf-config"
    arch["source"] = str(p)
    if cfg.get("head_dim") is not None:  # Gemma-2: 256, not hidden / heads
        arch["head_dim"] = cfg["head_dim"]
    model_type = cfg.get("model_type")
    dtype = config_dtype(cfg)
    if dtype is not None:  # the published weights' dtype
        arch["torch_dtype"] = dtype
    arch["model_type"] = str(model_type) if model_type is not None else None
    notes = []
    if model_type is not None and str(model_type) not in HF_MODEL_TYPES:
        notes.append(f"model_type '{model_type}' is not one of the decoder families ftopt models "
                     f"({', '.join(sorted(HF_MODEL_TYPES))}); the figures assume a Llama-style decoder")  # fmt: skip
    arch["import_notes"] = tuple(notes)
    try:
        return validate(ModelArch, arch, str(p))
    except InputError as exc:  # name the config.json key, not ours
        names = {**_HF_KEYS, "kv_heads": "num_key_value_heads", "name": "_name_or_path", **keys}
        field = exc.field
        if not field:  # a check across fields: the message's first field is the one at fault
            found = [(m.start(), ours) for ours in names if (m := re.search(rf"\b{ours}\b", exc.problem))]
            field = min(found)[1] if found else ""
        hf_key = names.get(field, field)
        problem = exc.problem
        for ours, theirs in sorted(names.items(), key=lambda kv: -len(kv[0])):  # the message names ours too
            problem = re.sub(rf"\b{ours}\b", theirs, problem)
        raise InputError(str(p), hf_key, problem) from None


# config.json keys of the MoE families (transformers configuration_<type>.py): experts, experts per token, routed
# and shared expert widths, dense blocks. Mixtral: num_local_experts, num_experts_per_tok, intermediate_size per
# expert. Qwen2-MoE / Qwen3-MoE: num_experts, num_experts_per_tok, moe_intermediate_size, Qwen2-MoE's one shared
# expert of shared_expert_intermediate_size, and dense blocks where mlp_only_layers lists them or decoder_sparse_step
# skips them. DeepSeek (V2/V3 configuration_deepseek_v2/v3.py): n_routed_experts, n_shared_experts at
# moe_intermediate_size each, the first first_k_dense_replace blocks dense.
_EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
_MOE_TYPES = {"mixtral": "num_local_experts", "qwen2_moe": "num_experts", "qwen3_moe": "num_experts"}
# DeepSeek-V2/V3 multi-head latent attention: low-rank q and kv projections that ModelArch's q/k/v/o shapes do
# not describe (transformers configuration_deepseek_v3.py q_lora_rank, kv_lora_rank, qk_rope_head_dim)
_MLA_KEYS = ("kv_lora_rank", "q_lora_rank")


def _dense_blocks(cfg: dict[str, Any], layers: int, experts_key: str) -> tuple[int, str | None]:
    """Decoder blocks with a dense MLP in an MoE config, and the key that says so (None: every block is MoE)."""
    if isinstance(cfg.get("first_k_dense_replace"), int):
        return int(cfg["first_k_dense_replace"]), "first_k_dense_replace"
    only = cfg.get("mlp_only_layers") or []
    step = cfg.get("decoder_sparse_step", 1)
    if experts_key != "num_experts" or (not only and step in (None, 1)):
        return 0, None
    if not isinstance(step, int) or step < 1:
        raise InputError("", "decoder_sparse_step", f"must be a positive integer, not {step!r}")
    sparse = [i for i in range(layers) if i not in only and (i + 1) % step == 0]  # Qwen2MoeDecoderLayer's test
    return layers - len(sparse), "mlp_only_layers" if only else "decoder_sparse_step"


def moe_fields(cfg: dict[str, Any], label: str) -> tuple[dict[str, Any], dict[str, str]]:
    """ModelArch's MoE fields from a config.json, and which config key each came from (for error messages)."""
    mla = next((k for k in _MLA_KEYS if cfg.get(k)), None)
    if mla is not None:
        raise InputError(label, mla, "multi-head latent attention (DeepSeek-V2/V3) is not modelled: ftopt "
                         "models q/k/v/o attention (Llama, Mistral, Qwen, Mixtral); give the model inline")  # fmt: skip
    experts_key = next((k for k in _EXPERT_COUNT_KEYS if cfg.get(k)), None)
    expected = _MOE_TYPES.get(str(cfg.get("model_type")))
    if experts_key is None and expected is not None:  # read as dense, the model would be a fraction of its size
        raise InputError(label, expected, f"model_type {cfg.get('model_type')} is a mixture of experts and the "
                         f"config gives no {expected}: allowed: the expert count (8 for Mixtral-8x7B)")  # fmt: skip
    if experts_key is None:
        return {}, {}
    keys = {"experts": experts_key, "experts_per_token": "num_experts_per_tok"}
    out: dict[str, Any] = {"experts": cfg[experts_key], "experts_per_token": cfg.get("num_experts_per_tok", 1)}
    if cfg.get("moe_intermediate_size") is not None:
        out["expert_intermediate"] = cfg["moe_intermediate_size"]
        keys["expert_intermediate"] = "moe_intermediate_size"
    if cfg.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one shared expert of this width
        out.update(shared_experts=1, shared_intermediate=cfg["shared_expert_intermediate_size"])
        keys.update(shared_experts="shared_expert_intermediate_size",
                    shared_intermediate="shared_expert_intermediate_size")  # fmt: skip
    elif cfg.get("n_shared_experts"):  # DeepSeek: n shared experts of moe_intermediate_size
        out["shared_experts"] = cfg["n_shared_experts"]
        keys["shared_experts"] = "n_shared_experts"
    layers = cfg.get("num_hidden_layers")
    if isinstance(layers, int):
        try:
            dense, key = _dense_blocks(cfg, layers, experts_key)
        except InputError as exc:
            raise InputError(label, exc.field, exc.problem) from None
        if key is not None:
            out["dense_layers"] = dense
            keys["dense_layers"] = key
    return out, keys


def base_model_name(name: str, known: Iterable[str]) -> str | None:
    """The catalog name ``name`` is a variant of (Qwen2.5-7B-Instruct -> Qwen2.5-7B), or None.

    Endings in MODEL_VARIANT_SUFFIXES are removed one at a time (Llama-2-7b-chat-hf -> Llama-2-7b), and an
    organisation prefix (``meta-llama/``) is dropped.
    """
    lowered = {k.lower(): k for k in known}
    text = name.rsplit("/", 1)[-1].lower()
    while True:
        if text in lowered:
            return lowered[text]
        cut = next((sfx for sfx in MODEL_VARIANT_SUFFIXES if text.endswith(sfx)), None)
        if cut is None:
            return None
        text = text[: -len(cut)]


def _params_note(arch: ModelArch, catalog: Catalog, config_path: Path | None) -> str | None:
    """A warning when the parameter count the architecture implies is off from a published or stored total.

    Compared with: the catalog's published count for the same model name, and the size of the weights listed
    in ``model.safetensors.index.json`` beside the config (metadata.total_size / bytes of torch_dtype).
    """
    implied = arch.computed_params
    base = base_model_name(arch.name, [m.name for m in catalog.models.values()])
    published = catalog.models[base.lower()].params if base else None
    label = f"catalog {base}" if published else ""
    index = config_path.parent / "model.safetensors.index.json" if config_path else None
    if not published and index is not None and index.is_file():
        try:
            total = read_json(index, str(index), expected="a safetensors index")["metadata"]["total_size"]
            dtype = config_dtype(read_json(config_path, str(config_path)))  # type: ignore[arg-type]
        except (InputError, KeyError, TypeError, AttributeError):
            total, dtype = None, None  # an unreadable index only loses the cross-check
        width = {"bfloat16": 2, "float16": 2, "float32": 4}.get(str(dtype))
        published = int(total) // width if isinstance(total, int) and width else None
        label = f"{index.name} ({dtype} weights)"
    if not published or abs(implied / published - 1) <= PARAM_TOLERANCE:
        return None
    return (
        f"the architecture implies {implied / 1e9:,.3f} B parameters but {label} says {published / 1e9:,.3f} B "
        f"({implied / published - 1:+.1%}): check head_dim, tie_word_embeddings and intermediate_size"
    )


def resolve_model(scenario: Scenario, catalog: Catalog, scenario_path: str | Path | None = None) -> ModelArch:
    """The scenario's architecture: a catalog name (or a variant of one), an inline mapping or an HF config.json.

    What was assumed on the way (a variant read as its base, a parameter count that disagrees with a published
    one, an unfamiliar model_type) is kept in ``import_notes`` for the report.
    """
    label = str(scenario_path or "scenario")
    if isinstance(scenario.model, ModelArch):
        return scenario.model
    if isinstance(scenario.model, HfConfigRef):
        p = named_file(scenario.model.hf_config, scenario_path)
        arch = import_hf_config(p, label)
        note = _params_note(arch, catalog, p)
        return arch.model_copy(update={"import_notes": (*arch.import_notes, note)}) if note else arch
    name = scenario.model
    base = base_model_name(name, [m.name for m in catalog.models.values()])
    if base is None or base.lower() == name.lower():
        return catalog.model(name, label)
    note = (f"'{name}' read as '{base}': instruction-tuned, chat and -hf variants share their base model's "
            "architecture, and that is all the plan depends on")  # fmt: skip
    arch = catalog.model(base, label)
    return arch.model_copy(update={"import_notes": (*arch.import_notes, note)})
