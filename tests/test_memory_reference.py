"""Accuracy of the memory model on tests/data/reference/memory_cases*.yaml (the published cases of three files).

Every case's ``scenario`` mapping, saved as a file, must be accepted by ``ftopt estimate`` as written, and so must
the same scenario with the settings its notes state (NOTE_SETTINGS: torch.compile, activation offloading, the
optimizer step in backward, plain cross-entropy, LoRA dropout). Accuracy is judged with the note settings; boundary
cases are checked as inequalities (fits: total <= card x (1 - headroom); oom: above it); measured and derived cases
are compared in the source's unit and counter (tests/memory_reference_cases.py). Reported in docs/memory-model.md
(bench/memory_accuracy.py prints the table, as written and with note settings). The thresholds below are the
figures reached, kept as regression guards; KNOWN_GAPS lists the cases still beyond 25%, with the reason.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from optimizer.inputs.catalog import load_catalog
from optimizer.solve.planner import estimate_scenario
from tests.memory_reference_cases import (
    NOTE_SETTINGS,
    evaluate_all,
    evaluate_case,
    load_all_cases,
    load_cases,
    note_scenario,
    summary,
)

CASES = load_cases()  # memory_cases.yaml: every case fits the built-in catalog's offers
ALL_CASES = load_all_cases()  # with memory_cases_2.yaml (up to 512 GPUs, beyond any offer: reference_catalog)
RESULTS = {r.id: r for r in evaluate_all()}
MEMORY_KEYS = {"weights", "gradients", "optimizer", "activations", "logits", "overhead", "total", "capacity", "fits",
               "cpu_offload", "host_ram_needed", "host_ram_fits", "host_ram_limit"}  # fmt: skip

# case id -> why the prediction is still off by more than 25% with the note settings applied (evidence in
# docs/memory-model.md section 5.4, "Where the model misses, and why")
KNOWN_GAPS = {
    "mem-tt-llama2-7b-qlora-4090-alpaca": "reserved peak set at start-up: the same run's QLoRA tutorial table "
    "(pytorch/torchtune:docs/source/tutorials/qlora_finetune.rst) gives 9.13 GB reserved after model init and 9.29 GB "
    "in training; the allocator keeps the init reserve of torchao's unchunked NF4 quantiser of the time (32 B per "
    "element temporaries, later chunked: 'Note: Quantize in Chunks') and the model has no start-up term",
    "mem-tt-llama2-7b-lora-2x4090-alpaca": "reserved peak above the same recipe on one GPU (17.18 GB): FSDP1 "
    "sync_module_states start-up whose broadcast buffers NCCL recordStream kept alive (pytorch/torchtune PR #843, "
    "opened 2024-04-22, after this table, and merged: '78G instead of 23G'); whole bf16 model + shard = 21.0 GB",
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
@pytest.mark.parametrize("with_notes", [False, True], ids=["as-written", "note-settings"])
def test_estimate_accepts_every_reference_case(case, with_notes, tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(note_scenario(case) if with_notes else case["scenario"], sort_keys=False))
    est = estimate_scenario(path, {})
    assert set(est.memory.model_dump()) == MEMORY_KEYS
    # the CLI's estimate path (scenario -> planner -> report) reports the numbers the accuracy harness computes from
    # the case's pinned plan (enumerate_all -> memory.breakdown): a pin, note setting or row lost on the way fails
    harness = evaluate_case(case, load_catalog(), tmp_path, notes=with_notes).parts
    got = {k: getattr(est.memory, k) for k in ("weights", "gradients", "optimizer", "activations", "logits",
                                               "overhead", "total", "cpu_offload")}  # fmt: skip
    assert got == {k: harness[k] for k in got}


def test_estimate_cli_answers_a_reference_case_with_the_json_contract(run_cli, tmp_path):
    case = next(c for c in CASES if c["id"] == "mem-peft-llama2-70b-qlora-zero3-2xa100-40g")
    path = tmp_path / "case.yaml"
    # the measured run itself: fitted at the median error without headroom (it ran; at the default risk p90 it
    # would be judged too close to the card)
    path.write_text(yaml.safe_dump({**case["scenario"], "risk": "p50", "headroom": 0.0}, sort_keys=False))
    result = run_cli("estimate", path, "--json")
    assert result.exit_code == 0, result.output
    assert set(json.loads(result.stdout)["memory"]) == MEMORY_KEYS


@pytest.mark.parametrize("case_id", sorted(NOTE_SETTINGS))
def test_note_settings_quote_the_case_notes(case_id):
    notes = " ".join(next(c for c in ALL_CASES if c["id"] == case_id)["notes"].split())
    for _override, phrase in NOTE_SETTINGS[case_id]:
        assert phrase in notes, f"{case_id}: {phrase!r} is not in its notes"


# runs whose notes say torch.compile was on but that are evaluated without it, and why (memory_reference_cases.py)
COMPILE_NOT_EXPRESSIBLE = {
    "mem2-titan-llama3.1-8b-8xh100-s32k-fp8": "torchtitan 2024 compiled the blocks, not the loss",
    "mem2-titan-llama3.1-70b-256xh100-2d-fp8": "torchtitan 2024 compiled the blocks, not the loss",
    "mem2-titan-llama3.1-405b-512xh100-3d-1f1b": "torchtitan 2024 compiled the blocks, not the loss",
    "h-mem-19-tt-llama2-7b-qlora-4090": "torchtune May 2024 compiled the model and held the plain loss's logits",
}
COMPILED_IN_NOTES = [c for c in ALL_CASES if re.search(r"(?<![Nn]o )torch\.compile|--training\.compile",
                                                       " ".join((c.get("notes") or "").split()))]  # fmt: skip


@pytest.mark.parametrize("case", COMPILED_IN_NOTES, ids=[c["id"] for c in COMPILED_IN_NOTES])
def test_a_run_its_notes_say_was_compiled_is_evaluated_compiled_or_says_why_not(case):
    # four torchtune rows of the third file had been evaluated uncompiled, their notes written before
    # training.compile existed ("not expressible here"): +21.7%, +7.5%, +10.1% instead of +7.8%, -1.3%, -3.9%
    compiled = bool(note_scenario(case).get("training", {}).get("compile"))
    assert compiled != (case["id"] in COMPILE_NOT_EXPRESSIBLE)


QWEN_V1 = [c for c in ALL_CASES if c["source"].startswith("QwenLM/Qwen")]


@pytest.mark.parametrize("case", QWEN_V1, ids=[c["id"] for c in QWEN_V1])
def test_qwen_rows_take_the_16bit_loss_under_deepspeed_and_the_autocast_loss_without(case):
    # every row of Qwen's profiling table runs modeling_qwen.py's cross-entropy on the 16-bit logits; only under
    # DeepSpeed does it see them (no autocast): the single-GPU LoRA script's HF Trainer --bf16 autocasts the loss
    # to float32, the path ftopt prices by default. Every LoRA row keeps finetune.py's dropout 0.05.
    scenario = note_scenario(case)
    deepspeed = (case["scenario"]["plan"].get("zero_stage") or 0) > 0
    assert (scenario.get("training", {}).get("loss") == "standard_16bit") == deepspeed
    if case["scenario"]["method"] != "full":
        assert scenario["lora"]["dropout"] == 0.05


@pytest.mark.parametrize("case_id", [c["id"] for c in ALL_CASES if c["kind"] == "boundary"])
def test_boundary_case_holds(case_id):
    r = RESULTS[case_id]
    assert r.bound_holds, f"{case_id}: bound {r.bound}, predicted {r.predicted:.1f} {r.unit} vs card {r.measured}"


MEASURED = [c["id"] for c in ALL_CASES if c["kind"] != "boundary"]


@pytest.mark.parametrize("case_id", [i for i in MEASURED if i not in KNOWN_GAPS])
def test_case_within_25_percent(case_id):
    r = RESULTS[case_id]
    assert abs(r.error) <= 0.25, (
        f"{case_id}: predicted {r.predicted:.2f}, measured {r.measured} {r.unit} ({r.error:+.1%})"
    )


@pytest.mark.parametrize("case_id", sorted(KNOWN_GAPS))
def test_known_gap_stays_within_100_percent(case_id):
    r = RESULTS[case_id]
    assert abs(r.error) <= 1.0, (
        f"{case_id}: predicted {r.predicted:.2f}, measured {r.measured} {r.unit} ({r.error:+.1%})"
    )


def test_median_error_on_tuned_cases_is_at_most_10_percent():
    s = summary(list(RESULTS.values()), "tuned")
    assert s["median"] <= 0.10, s


def test_median_error_on_held_out_cases_is_at_most_10_percent():
    s = summary(list(RESULTS.values()), "held-out")
    assert s["median"] <= 0.10, s


def test_median_error_over_all_measured_cases_is_at_most_10_percent():
    s = summary(list(RESULTS.values()))
    assert s["median"] <= 0.10, s


@pytest.mark.parametrize("case_id", sorted(KNOWN_GAPS))
def test_known_gap_is_still_beyond_25_percent(case_id):
    # a gap that closes must leave KNOWN_GAPS and be held to 25% like every other case
    assert abs(RESULTS[case_id].error) > 0.25, f"{case_id} is now within 25%: remove it from KNOWN_GAPS"
