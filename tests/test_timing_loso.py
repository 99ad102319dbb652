"""The step-time model against every published throughput case, source by source (bench/loso.py).

Each source (bench/loso.py SOURCES) is predicted with the constants fitted on the other sources only. Targets
(issues 10 and 21): median |error| <= 12% over the measured cases and no source's median beyond 25%, every source
included since the ZeRO-Offload row has a second Volta source beside it (docs/time-model.md section 3, "A second
Volta source"); docs/time-model.md has the per-case table.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

_spec = importlib.util.spec_from_file_location("loso", REPO / "bench" / "loso.py")
loso = sys.modules.setdefault("loso", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(loso)

# the session's LOSO fixture (17 folds over 132 cases, about 50 s alone) is computed in whichever test asks first
pytestmark = pytest.mark.timeout(600)
CASES = [c for f in loso.CASE_FILES for c in yaml.safe_load(f.read_text())["cases"] if "excluded" not in c]


@pytest.fixture(scope="module")
def cases(loso_cases):
    return loso_cases


@pytest.fixture(scope="module")
def consts(catalog):
    return catalog.calibration["timing"]


@pytest.fixture(scope="module")
def rows(loso_rows):
    return loso_rows


def _report(rows) -> str:
    return "\n".join(f"{r.case.id}: predicted {r.predicted:,.0f} published {r.case.published:,.0f} ({r.error:+.1%})"
                     for r in rows)  # fmt: skip


def test_every_case_of_both_files_is_scored_once(rows):
    assert [r.case.id for r in rows] == [c["id"] for c in CASES]
    assert {r.case.source for r in rows} == {name for _, name in loso.SOURCES}


def test_measured_median_error_within_12_percent(rows):
    measured = [r for r in rows if r.case.kind == "measured"]
    median = statistics.median(abs(r.error) for r in measured)
    assert median <= 0.12, f"median {median:.1%}\n{_report(measured)}"


@pytest.mark.parametrize("source", list(dict.fromkeys(n for _, n in loso.SOURCES)))
def test_source_median_within_25_percent(rows, source):
    chosen = [r for r in rows if r.case.source == source]
    median = statistics.median(abs(r.error) for r in chosen)
    assert median <= 0.25, f"{source}: median {median:.1%}\n{_report(chosen)}"


def test_fitted_constants_are_those_of_the_fit(cases, consts):
    # calibration.yaml must hold what `python bench/loso.py --write` fits on all sources (it cannot drift).
    fitted = loso.fit([c for c in cases if c.fit], consts)
    for path, _ in loso.FIT:
        assert loso._get(consts, path) == pytest.approx(loso._get(fitted, path), abs=2e-3), path
    for gpu in loso.GPU_FIT:
        assert consts["efficiency_gpu"][gpu] == pytest.approx(fitted["efficiency_gpu"][gpu], abs=2e-3), gpu
    for arch in loso.DERIVED_ARCH:
        assert consts["efficiency"][arch] == pytest.approx(fitted["efficiency"][arch], abs=2e-3), arch


def test_uncertainty_bands_are_calibrated(rows, catalog):
    # Issue 10: the published figure lies inside the p10-p90 band of its LOSO prediction for 75-85% of the cases,
    # with the band each plan would get (optimizer/models/uncertainty.py time_band, by group).
    share = loso.coverage(rows, catalog.calibration["accuracy"])
    assert 0.75 <= share <= 0.85, f"{share:.1%}"


def test_sharded_data_parallel_across_nodes_within_25_percent(rows):
    # Issue 21: the PTD paper's ZeRO-3 rows (DeepSpeed, 384-2,240 A100s: per-GPU throughput halves with each
    # doubling) and every other multi-node ZeRO-3 / FSDP case, each predicted with its source left out.
    chosen = [r for r in rows if r.case.nodes > 1 and r.case.inputs[1].zero_stage[0] == 3]
    assert len(chosen) >= 20
    # torchtitan's Grand Teton H100s (500 W, HBM2e) are +42% on ONE node as well: per-card speed, not the fabric
    # fms-fsdp's 7B on 96 H100s (+28%): 42 GB of gathers per 1.1 s step over 100 GB/s per node, predicted hidden
    # behind compute; a known miss (docs/time-model.md), held to 30%
    worst = [r for r in chosen if abs(r.error) > (0.30 if r.case.id == "tput2-fmsfsdp-7b-96xh100" else 0.25)
             and r.case.source != "torchtitan"]  # fmt: skip
    assert not worst, _report(worst)


def test_deepspeed_zero3_throughput_falls_with_gpus_at_fixed_batch(cases, consts):
    # 175B at global batch 1536: per-GPU compute halves from 768 to 1,536 GPUs while the gathered bytes per GPU
    # stay 6P, so tokens/s per GPU falls by about half (published 61.4 -> 30.7); the aggregate-NIC model kept it
    # within 15% (117 -> 99).
    by_id = {c.id: c for c in cases}
    ratio = (by_id["h-tput-d-megatron-175b-zero3-1536"].predict(consts)
             / by_id["h-tput-d-megatron-175b-zero3-768"].predict(consts))  # fmt: skip
    assert ratio == pytest.approx(30.7 / 61.4, rel=0.15)


def test_activation_checkpointing_ratio_matches_torchtune(cases, consts):
    # Fact ac-torchtune-3b-a100: AC lowers tokens/s from 9174 to 7210 (x 0.786); ours within 10% of that ratio.
    by_id = {c.id: c for c in cases}
    ratio = by_id["tput-tt-llama3.2-3b-full-ac"].predict(consts) / by_id["tput-tt-llama3.2-3b-full-packed"].predict(
        consts
    )
    assert ratio == pytest.approx(0.786, rel=0.10)


def test_tensor_parallel_shards_do_not_shrink_the_gemm_rows(cases, consts):
    # torchtitan's 70B on 256 H100: tp 8 at micro-batch 16 x 8192 tokens (published 597 tok/s/GPU): the old model
    # (efficiency saturating on b s / t tokens) and the new one agree here, but at micro-batch 1 the old one priced a
    # tp-8 shard at a third; the GEMM fill of the new one stays within 10% of tp 1 for h = 8192 (8192/8 = 1024 wide).
    c = next(c for c in cases if c.id == "tput2-titan-llama3.1-70b-256xh100-tp8-bf16")
    job, cfg, *_ = c.inputs
    one = cfg.take([0])
    fill_tp8 = loso.timing.gemm_fill(job, one, consts)[0]
    from dataclasses import replace

    fill_tp1 = loso.timing.gemm_fill(job, replace(one, tp=one.tp // 8), consts)[0]
    assert fill_tp8 / fill_tp1 > 0.9


# the first file's cases run on the built-in offers as written (the second file's clusters are larger than any offer;
# bench/loso.py gives every case an offer sized for it)
HOSTED = yaml.safe_load(loso.CASE_FILES[0].read_text())["cases"]
# Cases of the first file that no built-in offer rents as written, and why: they run on the offer bench/loso.py
# builds for them (the case's GPU, sold by the card).
NOT_RENTED_AS_WRITTEN = {
    "tput-zero-offload-gpt2-10b-1xv100": "one V100 SXM2: the built-in V100-32G offers are 8-card instances "
                                         "(the single-card Akash offer is the PCIe part, V100-PCIe-32G)",
}  # fmt: skip
# runs on NVLink boards whose cheapest built-in offer does not say SXM or PCIe (nvlink: null, planned as PCIe)
PCIE_ASSUMED_AS_WRITTEN = {
    "tput-llmfoundry-mpt-13b-s2048-8xa100-80g": "llm-foundry's 8 x A100-80GB SXM; AutoDL's A100-80G offer is planned "
                                                "as PCIe (0.49 x published)",
}  # fmt: skip


@pytest.mark.parametrize("case", HOSTED, ids=[c["id"] for c in HOSTED])
def test_estimate_accepts_every_case_as_written(case, run_cli, tmp_path: Path):
    path = tmp_path / f"{case['id']}.yaml"
    path.write_text(yaml.safe_dump(case["scenario"], sort_keys=False))
    result = run_cli("estimate", path, "--json")
    if case["id"] in NOT_RENTED_AS_WRITTEN:
        # premise: the built-in offers refuse the card count as written, on one line with exit 2
        assert result.exit_code == 2 and "plan.cards" in result.stderr and "splits an instance" in result.stderr
        offers = loso._offer_file(case, loso.source_of(case), tmp_path)
        result = run_cli("estimate", path, "--catalog", offers, "--json")
    if case["id"] in PCIE_ASSUMED_AS_WRITTEN:
        # premise: as written the estimate lands on an offer planned as PCIe and says so
        assert "NVLink: confirm" in result.stdout
        offers = loso._offer_file(case, loso.source_of(case), tmp_path)
        result = run_cli("estimate", path, "--catalog", offers, "--json")
    # valid input (never exit 2); exit 1 is an answer: the memory model says the configuration does not fit (a
    # memory finding for a run that did fit, reported in docs/memory-model.md, not a rejected case)
    assert result.exit_code in (0, 1), result.output
    out = json.loads(result.stdout)
    fits = out["memory"]["fits"] and out["memory"]["host_ram_fits"] is not False  # the card and the node's RAM
    assert (result.exit_code == 0) == fits == (out["status"] == "feasible")
    assert out["plan"]["cards"] == case["scenario"]["plan"]["cards"]
    # as written (built-in offers, not the bench's network-matched ones) every case lands within a factor of 2 of
    # its published tokens/s per GPU: a wrong answer by a factor of the card count, the accumulation steps or a
    # doubled FLOP count fails here, case by case
    per_gpu = out["time"]["tokens_per_second"] / out["plan"]["cards"]
    ratio = per_gpu / loso.published_tokens_per_second_per_gpu(case)
    assert 0.5 <= ratio <= 2.0, f"predicted {per_gpu:,.0f} tok/s/GPU = {ratio:.2f} x published"


def test_doc_table_is_current(rows):
    # docs/time-model.md embeds the table `python bench/loso.py --doc docs/time-model.md` writes.
    text = (REPO / "docs" / "time-model.md").read_text()
    assert loso.markdown(rows) in text


def test_the_2019_adlr_run_is_counted_as_its_team_counted_the_2020_run():
    # the 2020 post calls 62.4 TFLOP/s "a 60% improvement over our previously 39", so both count alike: the 2019 run's
    # tokens/s is the 2020 run's (1,288 ms per 8 x 1,024 tokens) x 39 / 62.4, not Megatron's later formula (7% fewer)
    doc = yaml.safe_load((loso.DATA / "throughput_cases_5.yaml").read_text())
    runs = {c["id"]: loso.published_tokens_per_second_per_gpu(c) for c in doc["cases"]}
    v1, v2019 = runs["h5-tput-megatron-v1.0-gpt2-1.2b-1xv100"], runs["h5-tput-megatron-2019-gpt2-1.2b-1xv100"]
    assert v1 == pytest.approx(8 * 1024 / 1.288, rel=1e-4)
    assert v2019 / v1 == pytest.approx(39 / 62.4, rel=1e-3)


def test_the_constants_table_of_the_doc_quotes_the_fitted_values(consts):
    # docs/time-model.md section 2 had kept the values of an older fit (volta 0.486, ada 0.736) through several refits
    text = (REPO / "docs" / "time-model.md").read_text(encoding="utf-8")
    eta = consts["efficiency"]
    factor = consts["framework_factor"]
    quoted = [f"fitted ({eta['volta']:g} / {eta['ampere']:g} / {eta['ada']:g} / {eta['hopper']:g})",
              f"fitted ({factor['torchtune']:g}) / fitted ({factor['nemo']:g})",
              f"fitted ({consts['saturation_tokens']:.0f}), prior 1024",
              f"fitted ({consts['link_efficiency']['host']:g}), prior 0.35"]  # fmt: skip
    assert [q for q in quoted if q not in text] == []


def test_the_held_out_source_is_scored_and_never_fitted(rows):
    # Answer.AI's FSDP+QLoRA benchmarks are kept aside to check the model (issue 21): every run is predicted, none
    # enters a fit, so calibration.yaml's constants are those of the other sources (test above)
    held = [r for r in rows if r.case.source == "fsdp-qlora"]
    assert len(held) == 17 and not any(r.case.fit for r in held)
    assert all(r.case.kind == "measured" and r.predicted > 0 for r in held)
