"""The page shell of an ``--html`` report: escaping, number formats, tables, and one self-contained document.

Everything the page needs is inline (style.css and page.js are package data read here), so it opens offline and
makes no request. Output is a pure function of its input: no dates, no random ids, fixed number formats. Every
font list in style.css names CJK fallbacks ("Noto Sans CJK SC", "PingFang SC", "Microsoft YaHei") before its
generic family, so a provider named in Chinese (the cn catalog) renders where the first font has no CJK glyphs.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

GIB = 2**30


def esc(value: Any) -> str:
    """Text escaped for HTML content and quoted attributes (``<``, ``>``, ``&``, both quotes)."""
    return html.escape("" if value is None else str(value), quote=True)


def num(value: float | None, digits: int = 2) -> str:
    """A number with thousands separators and ``digits`` decimals; a dash when missing."""
    return "-" if value is None else f"{value:,.{digits}f}"


def gib(n: float | None) -> str:
    """Bytes as GiB with one decimal."""
    return "-" if n is None else f"{n / GIB:,.1f} GiB"


def money(value: float | None, currency: str | None) -> str:
    """An amount with two decimals beside its currency."""
    return "-" if value is None else f"{value:,.2f} {esc(currency or '')}".rstrip()


@dataclass(frozen=True)
class Cell:
    """One table cell: the HTML shown and the value a column sort uses (a number, or text)."""

    html: str
    sort: float | str | None = None


def cell(text: Any, sort: float | str | None = None) -> Cell:
    """A cell from plain text (escaped here); ``sort`` defaults to the text."""
    return Cell(esc(text), str(text) if sort is None else sort)


def table(head: Sequence[str], rows: Iterable[Sequence[Cell]], *, ident: str = "", sortable: bool = False,
          row_attrs: Sequence[str] | None = None) -> str:  # fmt: skip
    """An HTML table; with ``sortable`` a click on a header sorts by that column's ``data-v`` values (page.js)."""
    id_attr = f' id="{esc(ident)}"' if ident else ""
    cls = ' class="sortable"' if sortable else ""
    out = [f"<table{id_attr}{cls}><thead><tr>"]
    out += [f'<th scope="col">{esc(h)}</th>' for h in head]
    out.append("</tr></thead><tbody>")
    for i, row in enumerate(rows):
        attrs = f" {row_attrs[i]}" if row_attrs else ""
        out.append(f"<tr{attrs}>")
        for c in row:
            v = c.sort
            data = "" if v is None else f' data-v="{esc(_sort_text(v))}"'
            numeric = isinstance(v, int | float) and not isinstance(v, bool)
            out.append(f"<td{' class=n' if numeric else ''}{data}>{c.html}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _sort_text(v: float | str) -> str:
    return repr(float(v)) if isinstance(v, int | float) and not isinstance(v, bool) else str(v)


def definitions(items: Iterable[tuple[str, str]]) -> str:
    """A definition list of (term, already-escaped HTML) pairs."""
    body = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in items)
    return f'<dl class="facts">{body}</dl>'


def section(ident: str, title: str, body: str) -> str:
    """One report section with a stable id (the browser tier checks each one)."""
    return f'<section id="{esc(ident)}"><h2>{esc(title)}</h2>{body}</section>\n'


def bullets(lines: Iterable[str]) -> str:
    """A bulleted list of plain lines (escaped here)."""
    items = "".join(f"<li>{esc(line)}</li>" for line in lines)
    return f"<ul>{items}</ul>" if items else ""


def _asset(name: str) -> str:
    return files("optimizer.report.html").joinpath(name).read_text(encoding="utf-8")


def page(title: str, subtitle: str, kind: str, sections: Sequence[str]) -> str:
    """The whole document: inline style and script, a header, the sections. No external reference of any kind."""
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_asset('style.css')}</style></head>\n"
        f'<body data-kind="{esc(kind)}"><header><h1>{esc(title)}</h1><p class="sub">{esc(subtitle)}</p></header>\n'
        f"<main>\n{''.join(sections)}</main>\n"
        '<div id="tip" role="tooltip" hidden></div>\n'
        f"<script>{_asset('page.js')}</script>\n</body></html>\n"
    )
