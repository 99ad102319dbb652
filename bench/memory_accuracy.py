"""Print the memory model's accuracy table (markdown) for docs/memory-model.md.

Usage (from the repository root): ``.venv/bin/python bench/memory_accuracy.py > /tmp/table.md``

For every case of tests/data/reference/memory_cases.yaml and memory_cases_2.yaml: the measurement, ftopt's
prediction in the source's unit and counter for the scenario as written and with the settings its notes state
(tests/memory_reference_cases.py, NOTE_SETTINGS), the errors, the split (tuned, held-out, boundary), and the seeds'
rules of thumb on the same cases (full = params(B) x 16 GB, LoRA x 5, QLoRA x 2.5: the midpoints of 16, 4-6 and
2-3 GB per billion parameters, divided by the card count). The logic lives in tests/memory_reference_cases.py,
shared with the accuracy test. The leave-one-source-out table is bench/memory_loso.py's.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from optimizer.models.uncertainty import ratio_quantiles  # noqa: E402
from tests.memory_reference_cases import (  # noqa: E402
    NOTE_SETTINGS,
    UNIT_BYTES,
    evaluate_all,
    heldout_ratios,
    load_all_cases,
    rule_of_thumb_gb,
    summary,
)


def _settings(case_id: str) -> str:
    """The note settings applied to a case, as short keys (compile, offload, ...)."""
    keys = []
    for over, _phrase in NOTE_SETTINGS.get(case_id, []):
        for section, values in over.items():
            keys += [f"{k}={v}" if section != "training" or not isinstance(v, bool) else k for k, v in values.items()]
    return ", ".join(keys) or "-"


def main() -> None:
    cases = {c["id"]: c for c in load_all_cases()}
    written = {r.id: r for r in evaluate_all(notes=False)}
    results = evaluate_all()
    print("| case | split | counter | measured | as written | error | note settings | ftopt | error | rule of thumb "
          "| error |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    thumb_errs: dict[str, list[float]] = {"tuned": [], "held-out": []}
    for r in results:
        w = written[r.id]
        thumb = rule_of_thumb_gb(cases[r.id]) * 1e9 / UNIT_BYTES[r.unit]
        if r.bound is None:
            t_err = thumb / r.measured - 1.0
            thumb_errs[r.split].append(abs(t_err))
            ours, as_written, theirs = f"{r.error:+.0%}", f"{w.error:+.0%}", f"{t_err:+.0%}"
        else:
            ours = f"{r.bound}: {'holds' if r.bound_holds else 'VIOLATED'}"
            as_written = f"{w.bound}: {'holds' if w.bound_holds else 'VIOLATED'}"
            theirs = "fits" if thumb <= r.measured * 0.95 else "oom"
        print(f"| {r.id} | {r.split} | {r.metric} | {r.measured:g} {r.unit} | {w.predicted:.1f} | {as_written} "
              f"| {_settings(r.id)} | {r.predicted:.1f} | {ours} | {thumb:.1f} | {theirs} |")  # fmt: skip
    print()
    print("| split | cases | as written median | as written max | ftopt median | ftopt max | within 25% "
          "| rule of thumb median | rule of thumb max |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for split in ("tuned", "held-out", None):
        s, w = summary(results, split), summary(list(written.values()), split)
        t = thumb_errs[split] if split else thumb_errs["tuned"] + thumb_errs["held-out"]
        inside = sum(1 for r in results if r.bound is None and (split is None or r.split == split)
                     and abs(r.error) <= 0.25)  # fmt: skip
        print(f"| {split or 'all'} | {s['cases']} | {w['median']:.1%} | {w['max']:.1%} | {s['median']:.1%} "
              f"| {s['max']:.1%} | {inside} | {statistics.median(t):.1%} | {max(t):.1%} |")  # fmt: skip
    print()
    print(f"calibration.yaml accuracy.memory: {ratio_quantiles(heldout_ratios(results), tail=True)}")


if __name__ == "__main__":
    main()
