"""Print the memory model's leave-one-source-out table (markdown) for docs/memory-model.md section 5.

Usage (from the repository root): ``.venv/bin/python bench/memory_loso.py``

For each source (the repository a reference case comes from) the fitted memory constants (context, fragmentation)
are fitted on the measured cases of every other source and the left-out source is scored with them
(tests/memory_loso.py). Prints one row per source (cases, the constants of its fold, median and worst |error|), the
median over every case, and then one row per case with its signed error in its fold.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.memory_loso import linear_terms, loso, per_source_table  # noqa: E402


def main() -> None:
    cases = linear_terms()
    folds = loso(cases)
    print("\n".join(per_source_table(folds)))
    print()
    by_id = {c.result.id: c.result for c in cases}
    print("| case | source | counter | measured | LOSO error |")
    print("|---|---|---|---|---|")
    for f in folds:
        for case_id, err in f.errors.items():
            r = by_id[case_id]
            print(f"| {case_id} | {f.source} | {r.metric} | {r.measured:g} {r.unit} | {err:+.1%} |")


if __name__ == "__main__":
    main()
