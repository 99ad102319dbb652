"""Safe YAML reading with one-line errors, and pydantic validation errors turned into the same form.

Guards against what a hand-edited or hostile file can do to a loader: missing paths, directories, non-UTF-8
bytes, files too large, alias bombs (many aliases expanding one node), recursive or deeply nested structures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from optimizer.errors import InputError, did_you_mean

MAX_FILE_BYTES = 4 * 1024 * 1024  # no real scenario or catalog comes near this
MAX_ALIASES = 64  # a real file needs few aliases; billion-laughs documents need many
MAX_DEPTH = 32

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
M = TypeVar("M", bound=BaseModel)


class _CountingLoader(_Loader):  # type: ignore[misc, valid-type]
    """Safe loader that refuses documents using more than MAX_ALIASES aliases."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases = getattr(self, "_aliases", 0) + 1
            if self._aliases > MAX_ALIASES:
                raise yaml.YAMLError(f"more than {MAX_ALIASES} aliases")
        return super().compose_node(parent, index)


def _depth(node: Any, limit: int, seen: int = 0) -> int:
    if seen > limit:
        return seen
    if isinstance(node, dict):
        return max([_depth(v, limit, seen + 1) for v in node.values()] or [seen + 1])
    if isinstance(node, list):
        return max([_depth(v, limit, seen + 1) for v in node] or [seen + 1])
    return seen


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file safely; raise InputError naming the file on any problem."""
    p = Path(path)
    label = str(path)
    if not p.exists():
        raise InputError(label, "", "file not found")
    if p.is_dir():
        raise InputError(label, "", "is a directory, expected a YAML file")
    if p.stat().st_size > MAX_FILE_BYTES:
        raise InputError(label, "", f"file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(label, "", f"not UTF-8 text (byte {exc.start})") from None
    try:
        loader_cls = _CountingLoader if "*" in text else _Loader
        loader = loader_cls(text)
        try:
            doc = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = exc.problem or exc.context or "malformed YAML"
        raise InputError(label, "", f"{where}malformed YAML: {problem}") from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise InputError(label, "", f"malformed YAML: {exc}") from None
    if _depth(doc, MAX_DEPTH) > MAX_DEPTH:
        raise InputError(label, "", f"nested deeper than {MAX_DEPTH} levels (or recursive)")
    return doc


def field_path(loc: tuple[Any, ...]) -> str:
    """Dotted path of a pydantic error location, list indices in brackets: ``plan.tp``, ``gpus[3].id``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before") or str(part).startswith(("tagged-union", "function")):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def _describe(err: dict[str, Any], model: type[BaseModel]) -> tuple[str, str]:
    loc = tuple(p for p in err["loc"] if isinstance(p, int) or not str(p).startswith("~"))
    path = field_path(loc)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        known = list(parent.model_fields) if parent else []
        key = str(loc[-1]) if loc else ""
        allowed = f"; allowed keys: {', '.join(known)}" if known else ""
        return path, f"unknown key{did_you_mean(key, known)}{allowed}"
    if err["type"] == "missing":
        return path, "required field is missing"
    value = err.get("input")
    shown = repr(value) if isinstance(value, str | int | float | bool) or value is None else type(value).__name__
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return path, f"{msg[0].lower() + msg[1:] if msg else msg}, got {shown}"


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return None
        current = _first_model(field.annotation)
        if current is None:
            return None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _first_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _first_model(arg)
        if found is not None:
            return found
    return None


def validate(model: type[M], data: Any, source: str, prefix: str = "") -> M:
    """Validate ``data`` against ``model``; on failure raise one InputError for the first problem."""
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise InputError(source, prefix.rstrip("."), f"expected a mapping of keys, got {got}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        path, problem = _describe(errors[0], model)
        raise InputError(source, prefix + path if path else prefix.rstrip("."), problem) from None
