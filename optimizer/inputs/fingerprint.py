"""The fingerprint of what a scenario is solved from, so that ``ftopt batch`` reuses a row only while it holds.

Rule (README.md "Batches", docs/json-contract.md ``inputs_sha256``): the SHA-256 of these parts, in this order,
each entered as a tag and the SHA-256 of its bytes, both length-prefixed (so different inputs never run together
into the same stream):

1. the scenario file's bytes;
2. the offers files it is solved with: those it names under ``catalog:`` (built-in names or paths, resolved as the
   solve resolves them: working directory, then the scenario's folder), else every built-in offers file;
3. the calibration overlay: ``--calibration`` when given, else the scenario's ``calibration:`` file;
4. the HF ``config.json`` of ``model: {hf_config: ...}`` and the ``model.safetensors.index.json`` beside it;
5. the built-in ``gpus.yaml``, ``models.yaml``, ``fx.yaml`` and ``calibration.yaml``.

A named file that cannot be found or read enters as its name alone (the solve reports it, and a batch retries error
rows anyway). A scenario that does not parse contributes its bytes only. A scenario that cannot be read at all has
no fingerprint (None): its row is never reused. ftopt's own code and the solver settings (``--time-limit``) are not
part of it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from optimizer.inputs.catalog import CATALOG_DIR, default_offer_files, named_file, resolve_offer_file
from optimizer.inputs.errors import InputError
from optimizer.inputs.inputfile import MAX_JSON_BYTES, read_bytes
from optimizer.inputs.yamlio import read_file_bytes, read_yaml

BUILTIN_DATA = ("gpus.yaml", "models.yaml", "fx.yaml", "calibration.yaml")
SAFETENSORS_INDEX = "model.safetensors.index.json"

FileDigests = dict[str, str]  # resolved path -> "sha256 hex" or "missing", one batch's cache


def file_digest(path: Path, cache: FileDigests | None = None) -> str:
    """The SHA-256 hex of one file's bytes (within the input limits), or ``missing`` when it cannot be read."""
    key = os.path.realpath(path)
    if cache is not None and key in cache:
        return cache[key]
    try:
        digest = hashlib.sha256(read_bytes(path, str(path), MAX_JSON_BYTES)).hexdigest()
    except InputError:
        digest = "missing"
    if cache is not None:
        cache[key] = digest
    return digest


def _names(value: Any) -> list[str]:
    """The file names a ``catalog:`` value gives (a name or a list of names); anything else names none."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _offer_parts(raw: dict[str, Any], path: str, cache: FileDigests | None) -> Iterator[tuple[str, str]]:
    """Part 2: each offers file the scenario is solved with (every built-in one when it names none)."""
    names = _names(raw.get("catalog"))
    if raw.get("catalog") is None:
        for f in default_offer_files():
            yield "offers", file_digest(f, cache)
        return
    for name in names:
        try:
            f = resolve_offer_file(name, path, "catalog", Path(path).parent)
        except InputError:
            yield "offers-missing", name
            continue
        yield "offers", file_digest(f, cache)


def _overlay_part(raw: dict[str, Any], path: str, calibration: str | None,
                  cache: FileDigests | None) -> Iterator[tuple[str, str]]:  # fmt: skip
    """Part 3: the calibration overlay, ``--calibration`` first (as given), else the scenario's file."""
    if calibration is not None:
        yield "overlay", file_digest(Path(calibration), cache)
    elif isinstance(raw.get("calibration"), str):
        yield "overlay", file_digest(named_file(raw["calibration"], path), cache)


def _hf_parts(raw: dict[str, Any], path: str, cache: FileDigests | None) -> Iterator[tuple[str, str]]:
    """Part 4: an HF config.json the scenario's model names, and the safetensors index beside it if there is one."""
    model = raw.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("hf_config"), str):
        return
    config = named_file(model["hf_config"], path)
    yield "hf_config", file_digest(config, cache)
    index = config.parent / SAFETENSORS_INDEX
    if index.is_file():
        yield "hf_index", file_digest(index, cache)


def inputs_digest(path: str, calibration: str | None = None, cache: FileDigests | None = None) -> str | None:
    """The fingerprint of scenario ``path`` and the files it is solved with (module docstring); None: unreadable.

    ``cache``: digests of files already read in this batch (the built-in catalogs are read once, not per scenario).
    """
    try:
        data = read_file_bytes(path)
    except InputError:
        return None
    parts: list[tuple[str, str]] = [("scenario", hashlib.sha256(data).hexdigest())]
    try:
        raw = read_yaml(path, data)
    except InputError:
        raw = None
    if isinstance(raw, dict):
        parts += [*_offer_parts(raw, path, cache), *_overlay_part(raw, path, calibration, cache),
                  *_hf_parts(raw, path, cache)]  # fmt: skip
    elif calibration is not None:
        parts += list(_overlay_part({}, path, calibration, cache))
    parts += [("data", file_digest(CATALOG_DIR / name, cache)) for name in BUILTIN_DATA]
    h = hashlib.sha256()
    for tag, value in parts:
        for text in (tag, value):
            chunk = text.encode("utf-8")
            h.update(len(chunk).to_bytes(8, "big") + chunk)
    return h.hexdigest()
