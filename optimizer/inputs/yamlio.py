"""Safe YAML reading with one-line errors, and pydantic validation errors turned into the same form.

Guards against what a hand-edited or hostile file can do to a loader: missing paths, directories, pipes and
devices, non-UTF-8 bytes, files too large (all read through optimizer/inputs/inputfile.py), duplicate keys, alias bombs
(a few aliases expanding to millions of values), recursive aliases and deeply nested structures. Every failure
is an :class:`InputError` naming the file, the field path (``budget.amount``, ``offers[3].prices.hour``) and
what is allowed; a file that is not a mapping is described by its type, never by its content.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from optimizer.inputs.errors import InputError, did_you_mean
from optimizer.inputs.inputfile import decode_utf8, read_bytes

MAX_FILE_BYTES = 4 * 1024 * 1024  # no real scenario or catalog comes near this
MAX_VALUES = 200_000  # values after expanding aliases; the built-in catalogs hold a few thousand
MAX_DEPTH = 32  # nesting levels; real files use at most 6

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
M = TypeVar("M", bound=BaseModel)


class _StrictLoader(_Loader):  # type: ignore[misc, valid-type]
    """Safe loader that refuses duplicate keys in a mapping (PyYAML silently keeps the last one)."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # unhashable keys: SafeConstructor reports them with their position
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (each key may appear once per mapping)", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_timestamp(self, node: Any) -> Any:
        """A date-shaped value that is no date (2026-13-45) is an error at its line, not an unplaced ValueError."""
        try:
            return super().construct_yaml_timestamp(node)
        except (ValueError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value!r} is not a date ({exc}): write YYYY-MM-DD", node.start_mark
            ) from None


_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", _StrictLoader.construct_yaml_timestamp)


class _TooDeep(Exception):
    """Raised by _shape past MAX_DEPTH levels, before Python's own recursion limit is reached."""


def _shape(doc: Any) -> int:
    """Expanded value count of a parsed document, without expanding shared (aliased) nodes.

    Each container is visited once: its expanded size is memoised by identity, so a billion-laughs document
    costs as many steps as it has distinct nodes. Raises RecursionError on a recursive alias and _TooDeep when
    the nesting passes MAX_DEPTH levels.
    """
    memo: dict[int, int] = {}
    active: set[int] = set()

    def visit(node: Any, level: int) -> int:
        if not isinstance(node, dict | list):
            return 1
        if level > MAX_DEPTH:
            raise _TooDeep
        key = id(node)
        if key in memo:
            return memo[key]
        if key in active:
            raise RecursionError("recursive alias")
        active.add(key)
        children = list(node.values()) if isinstance(node, dict) else node
        size = 1
        for child in children:
            size = min(size + visit(child, level + 1), 2**62)
        active.discard(key)
        memo[key] = size
        return size

    return visit(doc, 1)


def _read_text(p: Path, label: str) -> str:
    return decode_utf8(read_file_bytes(p), label)


def read_file_bytes(path: str | Path) -> bytes:
    """The bytes of a YAML file, read within the input limit (a regular file of at most MAX_FILE_BYTES)."""
    return read_bytes(Path(path), str(path), MAX_FILE_BYTES, "a YAML file")


def read_yaml(path: str | Path, data: bytes | None = None) -> Any:
    """Parse one YAML document safely; raise InputError naming the file (and line, column) on any problem.

    ``data``: the file's bytes, already read (:func:`read_file_bytes`); None reads them now.
    """
    p = Path(path)
    label = str(path)
    text = _read_text(p, label) if data is None else decode_utf8(data, label)
    try:
        loader = _StrictLoader(text)
        try:
            doc = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = exc.problem or exc.context or "malformed YAML"
        raise InputError(label, "", f"{where}malformed YAML: {problem}") from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise InputError(label, "", f"line {line}, column {column}: control character U+{char:04X} is not allowed "
                         "in YAML") from None  # fmt: skip
    except (yaml.YAMLError, RecursionError, ValueError, TypeError, OverflowError) as exc:
        raise InputError(label, "", f"malformed YAML: {exc}") from None
    try:
        values = _shape(doc)
    except RecursionError:
        raise InputError(label, "", "recursive YAML alias (a value that contains itself)") from None
    except _TooDeep:
        raise InputError(label, "", f"nested deeper than {MAX_DEPTH} levels") from None
    if values > MAX_VALUES:
        raise InputError(label, "", f"YAML aliases expand to more than {MAX_VALUES:,} values (an alias bomb?)")
    return doc


# ------------------------------------------------------------------------------------------------ pydantic errors


_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")


def field_path(loc: tuple[Any, ...]) -> str:
    """Dotted path of a pydantic error location, list indices in brackets: ``plan.tp``, ``gpus[3].id``.

    A key that does not look like a field name (punctuation, spaces, over 64 characters: a line of a file that
    is not a scenario or catalog at all, such as /etc/shadow read as YAML) is described, never echoed.
    """
    out = ""
    for part in loc:
        if isinstance(part, str) and not _KEY.fullmatch(part) and part != "[key]":
            part = f"(a {len(part):,}-character key that is not a field name)"
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            out += " (key)"
        elif part in ("function-after", "function-before") or str(part).startswith(("tagged-union", "function")):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def _num(value: Any) -> str:
    """A limit as a person writes it: 100,000 for integers, 1e+16 or 0.9 for floats."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:g}"


def _shown(value: Any) -> str:
    if isinstance(value, str | int | float | bool) or value is None:
        shown = repr(value)
    else:
        shown = f"a {type(value).__name__}"
    return shown if len(shown) <= 60 else shown[:57] + "..."


_BOUNDS = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
_KINDS = {
    "int_parsing": "must be an integer",
    "int_type": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "finite_number": "must be a finite number (not NaN or infinity)",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be a mapping of keys",
    "model_type": "must be a mapping of keys",
    "model_attributes_type": "must be a mapping of keys",
    "date_from_datetime_parsing": "must be a date (YYYY-MM-DD)",
    "date_parsing": "must be a date (YYYY-MM-DD)",
    "date_type": "must be a date (YYYY-MM-DD)",
}


def _problem(err: dict[str, Any]) -> str:
    """The human part of one pydantic error: what is required, then what was given."""
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    got = f", got {_shown(value)}"
    if isinstance(value, float) and not math.isfinite(value) and kind in (*_BOUNDS, "finite_number"):
        return _KINDS["finite_number"] + got
    if kind in _BOUNDS:
        limit = next(iter(ctx.values()), "?")
        return f"must be {_BOUNDS[kind]} {_num(limit)}{got}"
    if kind in _KINDS:
        return _KINDS[kind] + got
    if kind in ("enum", "literal_error"):
        expected = str(ctx.get("expected", ""))
        choices = re.findall(r"'([^']*)'", expected) or [c.strip() for c in re.split(r",| or ", expected) if c.strip()]
        hint = did_you_mean(str(value), choices) if isinstance(value, str) else ""
        return f"must be one of {', '.join(choices)}{got}{hint}"
    if kind == "string_pattern_mismatch":
        if ctx.get("pattern") == r"^[A-Z]{3}$":
            return f"must be a 3-letter upper-case ISO 4217 currency code such as USD or CNY{got}"
        return f"must match the pattern {ctx.get('pattern')}{got}"
    if kind == "string_too_long":
        return f"must be at most {_num(ctx.get('max_length'))} characters, got {len(value):,}"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s), got {ctx.get('actual_length')}"
    if kind == "too_long":
        return f"must have at most {ctx.get('max_length')} item(s), got {ctx.get('actual_length')}"
    msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    msg = msg[0].lower() + msg[1:] if msg else "invalid value"
    if kind in ("value_error", "assertion_error") and isinstance(value, dict | list):
        return msg  # a cross-field rule: the message already names the fields involved
    return msg + got


def _describe(err: dict[str, Any], model: type[BaseModel]) -> tuple[str, str]:
    loc = tuple(p for p in err["loc"] if isinstance(p, int) or not str(p).startswith("~"))
    path = field_path(loc)
    if err["type"] == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        known = list(parent.model_fields) if parent else []
        key = str(loc[-1]) if loc and _KEY.fullmatch(str(loc[-1])) else ""
        allowed = f"; allowed keys: {', '.join(known)}" if known else ""
        return path, f"unknown key{did_you_mean(key, known)}{allowed}"
    if err["type"] == "missing":
        parent = _model_at(model, loc[:-1])
        info = parent.model_fields.get(str(loc[-1])) if parent and loc else None
        about = f" ({info.description})" if info is not None and info.description else ""
        return path, f"required field is missing{about}"
    return path, _problem(err)


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


_YAML_TYPES = {"str": "plain text (not YAML keys)", "list": "a list", "int": "a number", "float": "a number",
               "bool": "a boolean", "date": "a date", "datetime": "a date", "bytes": "a binary value"}


def validate(model: type[M], data: Any, source: str, prefix: str = "") -> M:
    """Validate ``data`` against ``model``; on failure raise one InputError for the first problem."""
    if not isinstance(data, dict):
        got = "an empty file" if data is None and not prefix else _shown(data) if data is not None else "nothing"
        if not prefix and data is not None:  # a whole file that is not a mapping: name its type, never its content
            got = _YAML_TYPES.get(type(data).__name__, "a value that is not a mapping")
        raise InputError(source, prefix.rstrip("."), f"expected a mapping of keys, got {got}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        # a misspelt key shows up as an unknown key and a missing one: report the unknown key (it has the hint)
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        path, problem = _describe(first, model)
        raise InputError(source, prefix + path if path else prefix.rstrip("."), problem) from None
    except (RecursionError, OverflowError) as exc:  # pathological values pydantic cannot even inspect
        raise InputError(source, prefix.rstrip("."), f"cannot be validated: {exc}") from None


def validate_value(model: type[BaseModel], name: str, value: Any, source: str, label: str) -> Any:
    """Check one value (a command-line override) against ``model``'s field ``name``; errors name ``label``."""
    info = model.model_fields[name]
    try:
        return TypeAdapter(Annotated[info.annotation, info]).validate_python(value)
    except ValidationError as exc:
        raise InputError(source, label, _problem(exc.errors(include_url=False)[0])) from None
