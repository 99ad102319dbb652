"""Bad input gets one line naming file and field, exit status 2, no traceback (docs/design.md section 8).

The corpus lives in tests/bad_inputs/; its manifest.yaml names, for every case, the field the message must name
and text the problem must contain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from optimizer.inputs import yamlio
from optimizer.inputs.catalog import load_catalog
from optimizer.inputs.errors import InputError, did_you_mean
from optimizer.inputs.schema import Budget, Scenario

from .conftest import REPO, scenario_doc

CORPUS = REPO / "tests" / "bad_inputs"
CASES: list[dict[str, Any]] = yaml.safe_load((CORPUS / "manifest.yaml").read_text(encoding="utf-8"))["cases"]


def _case_id(case: dict[str, Any]) -> str:
    return "-".join([Path(case["file"]).stem, *[str(a).strip("-") for a in case.get("args", [])]])


def _run_case(case: dict[str, Any], run_cli, tmp_path: Path) -> tuple[Any, Path]:
    path = CORPUS / case["file"]
    if case.get("make") == "huge":
        path = tmp_path / case["file"]
        path.write_text((CORPUS / "_good.yaml").read_text() + "#" + "x" * (5 * 1024 * 1024) + "\n")
    if case.get("run") == "offers":
        return run_cli("solve", CORPUS / "_good.yaml", "--catalog", path, *case.get("args", [])), path
    return run_cli("solve", path, *case.get("args", [])), path


# ------------------------------------------------------------------------------------------------ the corpus


def test_corpus_has_at_least_forty_cases():
    assert len(CASES) >= 40


def test_every_corpus_file_is_a_case_or_a_helper():
    listed = {c["file"] for c in CASES}
    helpers = {p.name for p in CORPUS.iterdir() if p.name.startswith(("_", "hf_")) or p.name == "manifest.yaml"}
    assert {p.name for p in CORPUS.iterdir()} - helpers <= listed


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_bad_input_exits_2_with_one_line_naming_the_field(case, run_cli, tmp_path):
    result, path = _run_case(case, run_cli, tmp_path)
    named = CORPUS / case["names"] if "names" in case else path
    lines = result.stderr.splitlines()
    assert result.exit_code == 2, result.stderr
    assert len(lines) == 1, result.stderr
    prefix = f"ftopt: error: {named}: " + (f"{case['field']}: " if case["field"] else "")
    assert lines[0].startswith(prefix), f"{lines[0]!r} does not start with {prefix!r}"
    assert case["says"] in lines[0]
    assert "Traceback" not in result.output


OFFER_CASES = [c for c in CASES if c.get("run") == "offers" and "names" not in c]


@pytest.mark.parametrize("case", OFFER_CASES, ids=_case_id)
def test_bad_offers_file_fails_catalog_validate_the_same_way(case, run_cli):
    path = CORPUS / case["file"]
    result = run_cli("catalog", "validate", path)
    prefix = f"ftopt: error: {path}: " + (f"{case['field']}: " if case["field"] else "")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(prefix)  # the wording may differ (validate also says what kind of file)


@pytest.mark.parametrize("case", [c for c in CASES if c["file"] == "s_method_typo.yaml"], ids=_case_id)
def test_bad_input_writes_nothing_to_stdout(case, run_cli, tmp_path):
    result, _ = _run_case(case, run_cli, tmp_path)
    assert result.stdout == ""


# ------------------------------------------------------------------------------------------------ estimate


def test_estimate_with_tp_not_dividing_heads_names_plan_tp(run_cli, write_scenario):
    path = write_scenario()
    result = run_cli("estimate", path, "--gpu", "A100-80G", "--cards", "8", "--tp", "3", "--micro-batch", "1")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"ftopt: error: {path}: plan.tp: tp=3 must divide the attention heads")


def test_estimate_with_micro_batch_not_dividing_names_plan_micro_batch(run_cli, write_scenario):
    path = write_scenario()  # global batch 32 over 8 cards: 4 sequences per rank
    result = run_cli("estimate", path, "--gpu", "A100-80G", "--cards", "8", "--micro-batch", "3")
    assert result.exit_code == 2
    assert f"{path}: plan.micro_batch: micro_batch=3 must divide global_batch / dp = 4" in result.stderr


def test_estimate_with_unknown_gpu_suggests_the_nearest(run_cli, write_scenario):
    path = write_scenario()
    result = run_cli("estimate", path, "--gpu", "H10O-SXM", "--cards", "1", "--micro-batch", "1")
    assert result.exit_code == 2
    assert "plan.gpu: unknown GPU 'H10O-SXM', did you mean 'H100-SXM'?" in result.stderr


def _estimate_a100(run_cli, *extra: str):
    return run_cli("estimate", REPO / "scenarios" / "7b-lora.yaml", "--gpu", "A100-80G", "--cards", "1",
                   "--micro-batch", "1", *extra)  # fmt: skip


def test_estimate_with_an_offer_of_another_gpu_names_the_gpu_it_rents(run_cli):
    # premise: the scenario's catalog (us) holds aws-p5-h100, an H100-SXM offer, and A100-80G offers
    offers = load_catalog(["us"]).offers
    assert {o.gpu for o in offers if o.id == "aws-p5-h100"} == {"H100-SXM"}
    a100 = sorted(o.id for o in offers if o.gpu == "A100-80G")
    result = _estimate_a100(run_cli, "--offer", "aws-p5-h100")
    assert (result.exit_code, result.stdout, result.stderr.count("\n")) == (2, "", 1)
    line = result.stderr.strip()
    assert line.startswith(f"ftopt: error: {REPO / 'scenarios' / '7b-lora.yaml'}: plan.offer: offer 'aws-p5-h100' "
                           "rents H100-SXM, not the pinned A100-80G; allowed: an offer of A100-80G (")  # fmt: skip
    assert a100[0] in line and line.endswith("or pin gpu H100-SXM with this offer")
    assert "unknown offer" not in line and "did you mean" not in line


def test_estimate_with_an_offer_id_nothing_holds_is_still_unknown(run_cli):
    result = _estimate_a100(run_cli, "--offer", "aws-p4de-a100-80gx")
    assert result.exit_code == 2
    assert "plan.offer: unknown offer 'aws-p4de-a100-80gx', did you mean 'aws-p4de-a100-80g'?" in result.stderr


def test_estimate_with_a_precision_the_pinned_gpu_lacks_names_what_it_runs(run_cli, tmp_path):
    # premise: the us catalog offers GPUs with fp8 (H100-SXM), so "no offered GPU runs fp8" would be false; under
    # nemo as under hf the card, not the engine, refuses fp8 (torchtune's refusal: test_engines.py)
    catalog = load_catalog(["us"])
    assert any(catalog.gpus[o.gpu].fp8_tflops for o in catalog.offers)
    doc = yaml.safe_load((REPO / "scenarios" / "7b-lora.yaml").read_text())
    doc["training"] = {"framework": "nemo", "optimizer": "adamw"}
    path = tmp_path / "7b-lora-nemo.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = run_cli("estimate", path, "--gpu", "A100-80G", "--cards", "1", "--micro-batch", "1", "--precision", "fp8")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"ftopt: error: {path}: plan.precision: A100-80G has no "
                             "native fp8; it runs bf16, fp16, fp32: pin one of them, or a GPU with fp8\n")  # fmt: skip


def test_a_precision_no_offered_gpu_runs_names_what_each_runs(run_cli, write_scenario, tmp_path):
    price = {"hour": {"amount": 1.0, "source": "test fixture", "as_of": "2026-11-30"}}
    offers = {"schema_version": 1, "currency": "USD", "offers": [
        {"id": "t-a100", "provider": "Test", "gpu": "A100-80G", "cards_per_node": 8, "prices": price},
        {"id": "t-v100", "provider": "Test", "gpu": "V100-32G", "cards_per_node": 8, "prices": price}]}  # fmt: skip
    (tmp_path / "offers.yaml").write_text(yaml.safe_dump(offers, sort_keys=False))
    path = write_scenario(catalog="offers.yaml", plan={"precision": "fp8"},
                          training={"framework": "nemo", "optimizer": "adamw"})  # an engine with fp8
    result = run_cli("solve", path)
    assert result.exit_code == 2
    assert result.stderr == (f"ftopt: error: {path}: plan.precision: none of the offered GPUs runs fp8 natively: "
                             "A100-80G runs bf16, fp16, fp32; V100-32G runs fp16, fp32; pin one of those, or offer a "
                             "GPU with fp8\n")  # fmt: skip


def test_click_usage_error_is_one_line_with_exit_2(run_cli, write_scenario):
    result = run_cli("solve", write_scenario(), "--objective", "money")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "'money' is not one of 'cost', 'time'" in result.stderr


# ------------------------------------------------------------------------------------------------ yamlio units


def test_alias_bomb_is_refused_without_expanding_it(tmp_path):
    levels = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 12)
    )  # 10^12 values once expanded
    path = tmp_path / "bomb.yaml"
    path.write_text(levels)
    with pytest.raises(InputError, match="aliases expand to more than"):
        yamlio.read_yaml(path)


def test_a_few_aliases_are_accepted(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("base: &b {amount: 1.5, source: here}\nhour: *b\nday: *b\n")
    assert yamlio.read_yaml(path)["day"] == {"amount": 1.5, "source": "here"}


def test_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + yaml.safe_dump(scenario_doc()).encode())
    assert yamlio.read_yaml(path)["seq_len"] == 2048


def test_duplicate_key_error_gives_line_and_column(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("a: 1\nb:\n  c: 2\n  c: 3\n")
    with pytest.raises(InputError, match=r"dup\.yaml: line 4, column 3: malformed YAML: duplicate key 'c'"):
        yamlio.read_yaml(path)


def test_an_impossible_date_gives_its_line_and_column(tmp_path):
    # a catalog's as_of: 2026-13-45 said only "malformed YAML: month must be in 1..12", with no place
    path = tmp_path / "date.yaml"
    path.write_text("offers:\n  - id: x\n    as_of: 2026-13-45\n")
    with pytest.raises(InputError, match=r"date\.yaml: line 3, column 12: malformed YAML: '2026-13-45' is not a date"):
        yamlio.read_yaml(path)
    path.write_text("as_of: 2026-02-03\n")
    assert str(yamlio.read_yaml(path)["as_of"]) == "2026-02-03"


def test_misspelt_key_reports_the_unknown_key_not_the_missing_one():
    doc = scenario_doc(seq_len=None, seq_lenn=2048)
    with pytest.raises(InputError, match=r"^s\.yaml: seq_lenn: unknown key, did you mean 'seq_len'\?"):
        yamlio.validate(Scenario, doc, "s.yaml")


def test_command_line_value_is_checked_against_the_schema_field():
    with pytest.raises(InputError, match=r"^s\.yaml: --budget: must be > 0, got -1"):
        yamlio.validate_value(Budget, "amount", -1.0, "s.yaml", "--budget")


def test_command_line_value_that_validates_is_returned():
    assert yamlio.validate_value(Budget, "amount", 12.5, "s.yaml", "--budget") == 12.5


def test_did_you_mean_ignores_case():
    assert did_you_mean("a100-80g", ["A100-80G", "H100-SXM"]) == ", did you mean 'A100-80G'?"


def test_did_you_mean_is_empty_when_nothing_is_close():
    assert did_you_mean("zzzz", ["A100-80G", "H100-SXM"]) == ""


def test_error_message_with_newlines_becomes_one_line():
    assert "\n" not in str(InputError("a.yaml", "name", "bad\nvalue\n'x\ny'"))


def test_nesting_near_the_parser_limit_is_reported_as_too_deep(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 990 + "]" * 990 + "\n")  # deeper than Python's default recursion limit allows
    with pytest.raises(InputError, match=r"deep\.yaml: nested deeper than 32 levels$"):
        yamlio.read_yaml(path)
