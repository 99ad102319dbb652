"""The memory model judged on Answer.AI's FSDP+QLoRA benchmarks, a source it was never fitted on (issue 21).

The runs are the dual RTX 4090 rows of tests/data/reference/throughput_cases_6.yaml (their settings and notes); the
benchmark also prints each run's peak reserved memory per GPU, quoted here with its table
(AnswerDotAI/fsdp_qlora:benchmarks_03_2024.md@4cd6923). Each run is evaluated as the memory reference cases are
(tests/memory_reference_cases.py, the reserved counter) and compared; nothing is fitted.

    python bench/fsdp_qlora_memory.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.memory_reference_cases import evaluate_case, reference_catalog  # noqa: E402

CASES = REPO / "tests" / "data" / "reference" / "throughput_cases_6.yaml"
# peak reserved GiB per GPU, "Peak Memory (GiB)" of the dual 4090 tables, by the case id's tail
PEAK_GIB = {
    "7b-lora-ddp-bs4": 22.04, "7b-lora-fsdp-bs6": 21.35, "7b-lora-fsdp-offload-bs10": 22.69,
    "7b-qlora-ddp-bs8": 20.94, "7b-qlora-fsdp-bs10": 20.97, "7b-qlora-fsdp-offload-bs12": 22.38,
    "yi-34b-qlora-fsdp-bs2": 23.05, "yi-34b-qlora-fsdp-offload-bs4": 22.98, "70b-qlora-fsdp-offload-bs2": 14.92,
    "mistral-7b-qlora-fsdp-offload-bs12": 22.54, "mistral-7b-qlora-fsdp-offload-s24k": 22.54,
}
PREFIX = "h6-tput-fsdpqlora-"


def rows() -> list[tuple[str, float, float]]:
    """(run, measured GiB, predicted GiB) for every dual 4090 run with a published peak."""
    catalog = reference_catalog()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in yaml.safe_load(CASES.read_text(encoding="utf-8"))["cases"]:
            run = case["id"].removeprefix(PREFIX)
            if run not in PEAK_GIB:
                continue
            memory_case = {"id": case["id"], "source": case["source"], "kind": "measured", "scenario": case["scenario"],
                           "measured": {"peak": PEAK_GIB[run], "unit": "GiB", "metric": "reserved", "per_gpu": True}}
            result = evaluate_case(memory_case, catalog, Path(tmp))
            out.append((run, result.measured, result.predicted))
    return out


def main() -> None:
    print("| run (2 x RTX 4090, context 2,048 unless named) | measured GiB | predicted GiB | error |")
    print("|---|---|---|---|")
    for run, measured, predicted in rows():
        print(f"| {run} | {measured:.2f} | {predicted:.2f} | {predicted / measured - 1:+.1%} |")


if __name__ == "__main__":
    main()
