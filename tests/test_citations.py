"""Every "formulas.md" section a docstring, catalog or doc cites exists in docs/formulas.md (shipped with ftopt)."""

from __future__ import annotations

import re

from .conftest import REPO

FORMULAS = (REPO / "docs" / "formulas.md").read_text(encoding="utf-8")
HEADINGS = {m for m in re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\b", FORMULAS, flags=re.M)}
# "formulas.md section 4.4", "formulas.md §1.1/§1.4", "formulas.md Part II section 3.1", "formulas.md 3.3",
# "formulas.md sections 4.1-4.3"
CITATION = re.compile(r"formulas\.md`?\s*(?:Part I{1,2}\s*)?(?:sections?\s*)?§?(\d+(?:\.\d+)?)"
                      r"(?:\s*(?:-|/§?|and)\s*§?(\d+(?:\.\d+)?))?")  # fmt: skip
WHERE = ["optimizer", "catalogs", "docs", "scenarios", "bench"]


def _cited() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    files = [p for d in WHERE for p in (REPO / d).rglob("*") if p.suffix in (".py", ".yaml", ".md")]
    for path in [*files, REPO / "README.md"]:
        for m in CITATION.finditer(path.read_text(encoding="utf-8")):
            out.setdefault(str(path.relative_to(REPO)), set()).update(g for g in m.groups() if g)
    return out


def test_formulas_sections_cited_in_the_repository_exist():
    cited = _cited()
    assert cited, "expected citations of formulas.md"
    missing = {f: sorted(n for n in nums if n not in HEADINGS and n.split(".")[0] not in HEADINGS)
               for f, nums in cited.items()}  # fmt: skip
    assert {f: n for f, n in missing.items() if n} == {}
