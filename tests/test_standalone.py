"""The repository stands alone: no file refers to a path outside it, and its maps of itself stay true.

A clone on another machine has no sibling folders and no developer's home directory, so a citation of a folder beside
the checkout, or of an absolute path under a home or work directory, points at nothing there. Sources are cited by
public name (a repository and its file path, an article's address and title) or by a file inside the repository.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

# Spelled in pieces so that this file does not match its own patterns.
OUTSIDE = re.compile(
    "|".join([
        r"\.\./" + "shared",                  # a sibling folder of the checkout
        r"(?<![\w.])/" + r"work/",            # the development machine's work directory
        r"(?<![\w.])/" + r"home/[a-z_]",      # a Linux home directory
        r"(?<![\w.])/" + r"Users/[A-Za-z]",   # a macOS home directory
        r"\b" + "DESIGN" + r"\.md\b",         # team notes that are not in the repository
        r"\b" + "STYLE" + r"\.md\b",
    ])
)  # fmt: skip

# Readers of the published reference cases whose citations the reference-data copy rewrites (issue 23 item 4, the
# measurements copied in with their sources). Each must still need it: once its file is clean, drop it from here.
PENDING: set[str] = set()  # files allowed to refer outside the repository (none left)


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True,
                         check=True)  # fmt: skip
    return sorted(p for p in out.stdout.splitlines() if (REPO / p).is_file())


def _outside_refs() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for rel in _tracked():
        try:
            text = (REPO / rel).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # images and other binary files
        hits = [f"{rel}:{n}: {line.strip()[:120]}" for n, line in enumerate(text.splitlines(), 1)
                if OUTSIDE.search(line)]  # fmt: skip
        if hits:
            found[rel] = hits
    return found


def test_the_pattern_catches_what_it_is_for():
    for bad in ("see ../" + "shared/reference/x.yaml", "/" + "work/shared/seeds/002.txt", "/" + "home/dev/x",
                "/" + "Users/Dev/x", "DESIGN" + ".md section 2", "STYLE" + ".md rule 2"):  # fmt: skip
        assert OUTSIDE.search(bad), bad
    for fine in ("docs/design.md section 2", "tests/data/reference/memory_cases.yaml", "catalogs/v8/aws/vms.csv",
                 "https://example.org/work/page", "skypilot-org/skypilot-catalog catalogs/v9/aws/vms.csv"):  # fmt: skip
        assert not OUTSIDE.search(fine), fine


def test_no_tracked_file_refers_outside_the_repository():
    found = _outside_refs()
    offending = [hit for rel, hits in found.items() if rel not in PENDING for hit in hits]
    assert offending == []


def test_every_pending_file_still_needs_its_exemption():
    found = _outside_refs()
    stale = sorted(p for p in PENDING if p not in found)
    assert stale == [], f"these files no longer refer outside the repository: remove them from PENDING: {stale}"


def test_the_catalog_readme_counts_the_gpus_there_are():
    gpus = yaml.safe_load((REPO / "catalogs" / "gpus.yaml").read_text(encoding="utf-8"))["gpus"]
    readme = (REPO / "catalogs" / "README.md").read_text(encoding="utf-8")
    stated = [int(n) for n in re.findall(r"\((\d+) GPUs\)", readme)]
    assert stated == [len(gpus)]


def _layout_names() -> list[str]:
    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    block = text.split("<!-- layout:start -->")[1].split("<!-- layout:end -->")[0]
    names = []
    rows = [line for line in block.splitlines() if line.startswith("|")][2:]  # after the header row and its rule
    for row in rows:
        names += re.findall(r"`([^`]+)`", row.split("|")[2])
    return names


def test_the_design_page_places_every_module():
    """docs/design.md's stage table names every module of the package (``name``, ``prefix*`` or ``package/``)."""
    package = REPO / "optimizer"
    names = _layout_names()
    unplaced = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if rel.name == "__init__.py" and len(rel.parts) == 1:
            continue
        if len(rel.parts) > 1 and f"{rel.parts[0]}/" in names:
            continue
        if not any(fnmatch.fnmatch(path.stem, n) for n in names if not n.endswith("/")):
            unplaced.append(str(rel))
    assert unplaced == []
    stems = [p.stem for p in package.rglob("*.py")]
    assert [n for n in names if not n.endswith("/") and not fnmatch.filter(stems, n)] == []
