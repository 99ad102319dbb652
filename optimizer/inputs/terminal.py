r"""Text from files made safe to print: rich markup escaped, control characters shown as visible escapes.

A scenario name, offer id or note is data, not markup: ``[/x]`` must print as written (rich would parse it as a
closing tag and raise), and an ESC byte written as ``"\\e[2J"`` in a YAML file must not reach the terminal as a
command (rich strips only BEL, BS, VT, FF and CR). Every C0 and C1 control character but newline and tab becomes
its ``\\xNN`` form, as Python's ``repr`` writes it.
"""

from __future__ import annotations

import re

from rich.markup import escape as _escape_markup

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    r"""``text`` with control characters (newline and tab kept) replaced by ``\\xNN``; no markup escaping."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def escape(text: str) -> str:
    """``text`` safe inside a rich markup string: control characters made visible, then markup escaped."""
    return _escape_markup(visible(str(text)))
