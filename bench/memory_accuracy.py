"""Print the memory model's accuracy table (markdown) for docs/memory-model.md.

Usage (from the repository root): ``.venv/bin/python bench/memory_accuracy.py > /tmp/table.md``

For every case of ../shared/reference/memory_cases.yaml: ftopt's prediction in the source's unit and counter, the
measurement, the error, the split (tuned, held-out, boundary), and the seeds' rules of thumb on the same cases
(full = params(B) x 16 GB, LoRA x 5, QLoRA x 2.5: the midpoints of 16, 4-6 and 2-3 GB per billion parameters,
divided by the card count). The logic lives in tests/memory_reference_cases.py, shared with the accuracy test.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.memory_reference_cases import UNIT_BYTES, evaluate_all, load_cases, rule_of_thumb_gb, summary  # noqa: E402


def main() -> None:
    cases = {c["id"]: c for c in load_cases()}
    results = evaluate_all()
    print("| case | kind | split | counter | measured | ftopt | error | rule of thumb | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    thumb_errs: dict[str, list[float]] = {"tuned": [], "held-out": []}
    for r in results:
        thumb = rule_of_thumb_gb(cases[r.id]) * 1e9 / UNIT_BYTES[r.unit]
        if r.bound is None:
            t_err = thumb / r.measured - 1.0
            thumb_errs[r.split].append(abs(t_err))
            ours, theirs = f"{r.error:+.0%}", f"{t_err:+.0%}"
        else:
            ok = "holds" if r.bound_holds else "VIOLATED"
            ours = f"{r.bound}: {ok}"
            theirs = "fits" if thumb <= r.measured * 0.95 else "oom"
        print(f"| {r.id} | {r.kind} | {r.split} | {r.metric} | {r.measured:g} {r.unit} | {r.predicted:.1f} | {ours} "
              f"| {thumb:.1f} | {theirs} |")  # fmt: skip
    print()
    print("| split | cases | ftopt median | ftopt max | rule of thumb median | rule of thumb max |")
    print("|---|---|---|---|---|---|")
    for split in ("tuned", "held-out"):
        s = summary(results, split)
        t = thumb_errs[split]
        print(f"| {split} | {s['cases']} | {s['median']:.1%} | {s['max']:.1%} | {statistics.median(t):.1%} "
              f"| {max(t):.1%} |")  # fmt: skip
    s = summary(results)
    t = thumb_errs["tuned"] + thumb_errs["held-out"]
    print(f"| all | {s['cases']} | {s['median']:.1%} | {s['max']:.1%} | {statistics.median(t):.1%} | {max(t):.1%} |")


if __name__ == "__main__":
    main()
