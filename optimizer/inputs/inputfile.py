"""The one way ftopt reads a file: regular files only, at most a documented number of bytes, one-line errors.

Every input (scenario, catalogs, calibration overlay, portfolio, HF ``config.json``, ``trainer_state.json``,
safetensors index, log captures, SkyPilot CSV, measurement files) goes through :func:`read_bytes`:

- a named pipe, a device (``/dev/zero``), a socket or a directory is refused before a byte is read: the file is
  checked with ``stat`` first, then opened non-blocking (opening a pipe with no writer cannot hang) and checked
  again with ``fstat`` on the open descriptor, so a path swapped in between is still caught;
- at most ``limit`` bytes are read (``limit + 1`` to notice a larger file, even one that grows while read), so a
  file can never make ftopt hold more than its limit in memory;
- every failure is an :class:`InputError` naming the file.

Limits (README.md "Input limits"): YAML documents 4 MiB (yamlio.MAX_FILE_BYTES), JSON files 16 MiB, logs and
SkyPilot CSV files 64 MiB.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from optimizer.inputs.errors import InputError

MAX_JSON_BYTES = 16 * 1024 * 1024  # a config.json is a few KiB, a safetensors index some hundred KiB
MAX_LOG_BYTES = 64 * 1024 * 1024  # a long run's metric log, an nvidia-smi capture, a cloud's SkyPilot vms.csv
MAX_JSON_DEPTH = 64  # nesting levels; trainer_state.json uses 3
_CHUNK = 1024 * 1024


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISFIFO(mode):
        return "is a named pipe, not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a regular file"
    return "is not a regular file"


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n % 2**20 == 0 else f"{n:,} bytes"


def read_bytes(path: str | Path, label: str, limit: int, expected: str = "a file") -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``); InputError(label) naming what went wrong.

    ``expected`` completes the messages: "is a directory, expected a YAML file".
    """
    name = os.fspath(path)
    try:
        mode = os.stat(name).st_mode
    except FileNotFoundError:
        raise InputError(label, "", "file not found; check the path") from None
    except OSError as exc:
        raise InputError(label, "", f"cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise InputError(label, "", f"{_kind(mode)}, expected {expected}")
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(label, "", f"cannot be read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(label, "", f"{_kind(info.st_mode)}, expected {expected}")
        if info.st_size > limit:
            raise InputError(label, "", f"file is {info.st_size:,} bytes, larger than the {limit:,}-byte limit "
                             f"({_mib(limit)})")  # fmt: skip
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise InputError(label, "", f"file grew past the {limit:,}-byte limit ({_mib(limit)}) while read")
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(label, "", f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def decode_utf8(data: bytes, label: str) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped); InputError naming the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(label, "", f"not UTF-8 text (invalid byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                         "save the file as UTF-8") from None  # fmt: skip


def read_text(path: str | Path, label: str, limit: int, expected: str = "a text file") -> str:
    """:func:`read_bytes` decoded as UTF-8."""
    return decode_utf8(read_bytes(path, label, limit, expected), label)


def _depth(doc: Any, level: int = 1) -> int:
    """Nesting depth of a parsed JSON document, stopping as soon as it passes MAX_JSON_DEPTH."""
    if level > MAX_JSON_DEPTH or not isinstance(doc, dict | list):
        return level
    children = doc.values() if isinstance(doc, dict) else doc
    return max((_depth(c, level + 1) for c in children), default=level)


def parse_json(text: str, label: str, expected: str = "a JSON file") -> Any:
    """Parse JSON text; malformed JSON, integers too long to convert, or nesting past MAX_JSON_DEPTH -> InputError."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(label, "", f"line {exc.lineno}, column {exc.colno}: not valid JSON: {exc.msg}") from None
    except RecursionError:
        raise InputError(label, "", f"JSON nested too deeply; expected {expected}") from None
    except ValueError as exc:  # an integer of more than sys.get_int_max_str_digits() digits
        raise InputError(label, "", f"not valid JSON: {str(exc).split(';')[0]}; expected {expected}") from None
    if _depth(doc) > MAX_JSON_DEPTH:
        raise InputError(label, "", f"JSON nested deeper than {MAX_JSON_DEPTH} levels; expected {expected}")
    return doc


def read_json(path: str | Path, label: str, limit: int = MAX_JSON_BYTES, expected: str = "a JSON file") -> Any:
    """A bounded JSON file (:func:`read_text` then :func:`parse_json`)."""
    return parse_json(read_text(path, label, limit, expected), label, expected)
