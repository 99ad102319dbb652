"""Keep the figures a document quotes from a benchmark equal to what the benchmark measures now.

A benchmark that README.md or a doc quotes finds the sentence with a regular expression whose named groups are the
figures, and passes the values it measured: :func:`sync` reports every group that differs and, when asked,
rewrites just those characters (the words around them may wrap anywhere). CI runs the benchmarks with ``--check``
(.ci/figures-check); ``--write`` updates the documents after a change that moves the figures.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from optimizer.inputs.atomic import write_atomic

REPO = Path(__file__).resolve().parent.parent


def sync(path: Path, pattern: re.Pattern[str], values: dict[str, str], write: bool) -> list[str]:
    """One line per named group of ``pattern`` in ``path`` whose text is not ``values[group]``; with ``write``,
    the file is rewritten with the measured values. A missing sentence is one line too."""
    text = path.read_text(encoding="utf-8")
    found = pattern.search(text)
    name = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    if found is None:
        return [f"{name}: no sentence matches {pattern.pattern[:60]!r}..."]
    stale = []
    for group in sorted(values, key=lambda g: found.start(g), reverse=True):  # from the end: spans stay valid
        start, end = found.span(group)
        if text[start:end] != values[group]:
            stale.append(f"{name} {group}: quotes {text[start:end]}, measured {values[group]}")
            text = text[:start] + values[group] + text[end:]
    if write and stale:
        write_atomic(path, text)
    return stale[::-1]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--check`` and ``--write``, mutually exclusive."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="exit 1 where the documents quote other figures")
    group.add_argument("--write", action="store_true", help="write this run's figures into the documents")


def conclude(stale: list[str], check: bool, write: bool, failures: list[str] | None = None) -> None:
    """Print what differs (``stale:``) or was rewritten (``written:``), then the benchmark's own ``failures``
    (targets it missed, one line each); with ``check``, exit 1 when there is either."""
    for line in stale:
        print(("written: " if write else "stale: ") + line)
    for line in failures or []:
        print(line)
    if check and (stale or failures):
        sys.exit(1)
