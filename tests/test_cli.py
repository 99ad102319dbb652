"""The catalog and models commands: exit codes, output, one-line errors, help epilogs; thin command bodies."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml

from optimizer.inputs.schema import Term
from optimizer.inputs.schema_catalog import Gpu, Offer

from .conftest import REPO


def _json(result) -> object:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_catalog_list_shows_every_gpu(run_cli, catalog):
    result = run_cli("catalog", "list")
    assert result.exit_code == 0
    assert all(gpu_id in result.stdout for gpu_id in catalog.gpus)


def test_catalog_list_json_gives_memory_tflops_offers_and_cheapest_hourly_price(run_cli, catalog):
    rows = {r["gpu"]: r for r in _json(run_cli("catalog", "list", "--json"))}
    assert set(rows) == set(catalog.gpus)
    h100 = rows["H100-SXM"]
    offers = [o for o in catalog.offers if o.gpu == "H100-SXM" and Term.hour in o.prices]
    in_usd = {o.id: o.prices[Term.hour].amount * catalog.rate(o.currency, "USD").rate for o in offers}
    cheapest = min(offers, key=lambda o: in_usd[o.id])
    assert (h100["memory_gib"], h100["bf16_tflops"]) == (80, 989)
    assert h100["offers"] == len([o for o in catalog.offers if o.gpu == "H100-SXM"])
    assert (h100["cheapest_hourly"], h100["currency"]) == (cheapest.prices[Term.hour].amount, cheapest.currency)


def test_catalog_list_reads_the_given_offers_file(run_cli):
    rows = _json(run_cli("catalog", "list", "--catalog", REPO / "catalogs" / "offers" / "cn.yaml", "--json"))
    assert {r["currency"] for r in rows if r["currency"]} == {"CNY"}


def test_catalog_show_finds_a_gpu_by_alias_in_any_case(run_cli):
    result = run_cli("catalog", "show", "H100")
    assert result.exit_code == 0
    assert result.stdout.startswith("gpu H100-SXM\n")
    assert re.search(r"^  source: \S", result.stdout, re.M)
    assert re.search(r"^  as_of: 20\d\d-\d\d-\d\d$", result.stdout, re.M)


def test_catalog_show_gives_an_offer_with_each_price_source(run_cli, catalog):
    offer = next(o for o in catalog.offers if len(o.prices) > 1)
    result = run_cli("catalog", "show", offer.id)
    assert result.exit_code == 0
    for term, price in offer.prices.items():
        assert f"prices.{term.value}: {price.amount:g} {offer.currency} per card-{term.value}" in result.stdout
        assert f"as_of {price.as_of.isoformat()}" in result.stdout


@pytest.mark.parametrize(("ident", "model"), [("a100-80g", Gpu), ("aws-p5-h100", Offer)], ids=["gpu", "offer"])
def test_catalog_show_json_has_every_field(run_cli, ident, model):
    doc = _json(run_cli("catalog", "show", ident, "--json"))
    assert set(doc) == {"kind", *model.model_fields}


def test_catalog_show_unknown_id_is_a_one_line_error(run_cli):
    result = run_cli("catalog", "show", "h10x")
    assert result.exit_code == 2
    assert re.fullmatch(r"ftopt: error: catalog: ID: no GPU or offer 'h10x', did you mean 'H100-SXM'\?; "
                        r"see ftopt catalog list\n", result.stderr)  # fmt: skip
    assert result.stdout == ""


def test_catalog_validate_checks_the_built_in_catalog(run_cli, catalog):
    result = run_cli("catalog", "validate")
    assert result.exit_code == 0
    n_files = 3 + len(list((REPO / "catalogs" / "offers").glob("*.yaml")))
    assert result.stdout == (f"ok: {n_files} files: {len(catalog.gpus)} gpus, {len(catalog.offers)} offers, "
                             f"{len(catalog.models)} models, {len(catalog.fx)} fx rates\n")  # fmt: skip


def test_catalog_validate_accepts_one_offers_file(run_cli):
    result = run_cli("catalog", "validate", REPO / "catalogs" / "offers" / "cn.yaml")
    assert re.fullmatch(r"ok: 1 file: 0 gpus, \d+ offers, 0 models, 0 fx rates\n", result.stdout)


def test_catalog_validate_takes_a_built_in_name_as_scenarios_do(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file called "us" here: the name is the built-in catalog, as `catalog: us` reads it
    n_us = len(yaml.safe_load((REPO / "catalogs" / "offers" / "us.yaml").read_text())["offers"])
    assert run_cli("catalog", "validate", "us").stdout == f"ok: 1 file: 0 gpus, {n_us} offers, 0 models, 0 fx rates\n"
    wrong = run_cli("catalog", "validate", "uss")
    assert wrong.exit_code == 2 and "built-in catalogs: aws, cn" in wrong.stderr and wrong.stderr.count("\n") == 1


def _offers(tmp_path, **changes) -> str:
    price = {"amount": 1.5, "source": "my price list", "as_of": "2026-01-01"}
    offer = {"id": "my-offer", "provider": "Me", "gpu": "A100-80G", "cards_per_node": 8, "prices": {"hour": price}}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"schema_version": 1, "currency": "USD", "offers": [{**offer, **changes}]}))
    return str(path)


def test_catalog_validate_accepts_a_new_offer(run_cli, tmp_path):
    assert run_cli("catalog", "validate", _offers(tmp_path)).stdout.startswith("ok: 1 file: 0 gpus, 1 offers")


def test_catalog_validate_notes_offers_no_exchange_rate_reaches(run_cli, tmp_path):
    """Valid, exit 0, but a USD budget would be refused on EUR offers: validate says so before a solve does."""
    path = tmp_path / "mine.yaml"
    doc = yaml.safe_load(Path(_offers(tmp_path)).read_text())
    path.write_text(yaml.safe_dump({**doc, "currency": "EUR"}))
    result = run_cli("catalog", "validate", path)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[1:] == ["note: offers priced in EUR have no exchange rate in the built-in "
                                              "catalogs/fx.yaml: a scenario budget in another currency is refused"]
    assert run_cli("catalog", "validate", _offers(tmp_path)).stdout.count("\n") == 1  # USD has a rate: no note


def test_catalog_validate_notes_an_offer_id_a_built_in_offer_uses_which_only_add_catalog_refuses(run_cli, tmp_path):
    """--catalog and catalog: replace the built-in offers, so a re-imported or edited copy of a built-in file is
    valid; --add-catalog loads it beside them and refuses the clash: validate passes it with a note saying so."""
    path = _offers(tmp_path, id="lambda-h100-sxm")
    result = run_cli("catalog", "validate", path)
    assert result.exit_code == 0
    assert "'lambda-h100-sxm' (us.yaml)" in result.stdout and "--add-catalog" in result.stdout
    us = REPO / "catalogs" / "offers" / "us.yaml"
    said = (f"ftopt: error: {path}: offers[0].id: duplicate offer id 'lambda-h100-sxm' (also in {us}): allowed: "
            "an id no other offer uses, built-in ones included\n")  # fmt: skip
    added = run_cli("solve", REPO / "scenarios" / "7b-lora.yaml", "--add-catalog", path)
    assert (added.exit_code, added.stderr) == (2, said)
    assert run_cli("solve", REPO / "scenarios" / "7b-lora.yaml", "--catalog", path).exit_code in (0, 1)
    assert "--add-catalog" not in run_cli("catalog", "validate", _offers(tmp_path, id="my-own-h100")).stdout


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"gpu": "A100-800G"}, r"offers\[0\]\.gpu: unknown GPU 'A100-800G', did you mean 'A100-80G'\?"),
        ({"cards_per_nod": 8}, r"offers\[0\]\.cards_per_nod: unknown key, did you mean 'cards_per_node'\?.*"),
        ({"max_nodes": 4}, r"offers\[0\]: max_nodes > 1 needs inter_node_gb_per_s .*"),
        ({"prices": {"year": {"amount": 1, "source": "x list", "as_of": "2026-01-01"}}}, r"offers\[0\]\.prices\..*"),
    ],
    ids=["unknown-gpu", "unknown-key", "cross-field", "unknown-term"],
)
def test_catalog_validate_reports_the_first_problem_in_one_line(run_cli, tmp_path, changes, pattern):
    path = _offers(tmp_path, **changes)
    result = run_cli("catalog", "validate", path)
    assert result.exit_code == 2
    assert re.fullmatch(rf"ftopt: error: {re.escape(path)}: {pattern}\n", result.stderr), result.stderr


def test_catalog_validate_rejects_a_file_that_is_not_a_catalog(run_cli):
    result = run_cli("catalog", "validate", REPO / "scenarios" / "70b.yaml")
    assert result.exit_code == 2
    assert re.fullmatch(r"ftopt: error: .*70b\.yaml: not a catalog file: expected a top-level key gpus, offers, "
                        r"models or rates\n", result.stderr)  # fmt: skip


def test_catalog_validate_reports_a_missing_file(run_cli, tmp_path):
    result = run_cli("catalog", "validate", tmp_path / "nope.yaml")
    assert result.exit_code == 2
    assert re.fullmatch(r"ftopt: error: .*nope\.yaml: file not found.*\n", result.stderr)


def test_models_list_shows_every_model(run_cli, catalog):
    result = run_cli("models", "list")
    assert result.exit_code == 0
    assert "Llama-3.1-70B" in result.stdout.replace("\n", "")


def test_models_list_json_gives_parameter_counts(run_cli, catalog):
    rows = {r["name"]: r for r in _json(run_cli("models", "list", "--json"))}
    assert rows["Llama-3.1-8B"]["params"] == 8_030_261_248
    assert len(rows) == len(catalog.models)
    # every field of the entry (an MoE's active experts, the model type, the published dtype had been left out)
    mixtral = rows["Mixtral-8x7B"]
    assert (mixtral["experts"], mixtral["experts_per_token"], mixtral["model_type"]) == (8, 2, "mixtral")
    assert rows["Qwen2.5-7B"]["qkv_bias"] is True and rows["Llama-3.1-8B"]["torch_dtype"] == "bfloat16"
    assert "8 (2 active)" in " ".join(run_cli("models", "list").stdout.split())


@pytest.mark.parametrize("command", [["catalog"], ["catalog", "list"], ["catalog", "show"], ["catalog", "validate"],
                                     ["models"], ["models", "list"]], ids=" ".join)  # fmt: skip
def test_help_ends_with_examples(run_cli, command):
    result = run_cli(*command, "--help")
    assert result.exit_code == 0
    assert re.search(r"Examples:\n( +ftopt .+\n)+\Z", result.stdout), result.stdout


@pytest.mark.parametrize("group", [[], ["catalog"], ["models"], ["catalog", "import"]], ids=" ".join)
def test_a_group_without_its_subcommand_prints_its_help_on_several_lines(run_cli, group):
    # click >= 8.2 raises the help as a usage error, which main squashed into one 1,500-character error line
    result = run_cli(*group)
    assert result.exit_code == 2 and result.stdout == "", result.stdout
    assert result.stderr == run_cli(*group, "--help").stdout
    assert "ftopt: error" not in result.stderr and result.stderr.count("\n") > 10


def test_command_bodies_are_short():
    tree = ast.parse((REPO / "optimizer" / "cli" / "commands.py").read_text(encoding="utf-8"))
    command = re.compile(r"\.(command|group)\b")
    decorated = [f for f in tree.body if isinstance(f, ast.FunctionDef)]
    commands = [f for f in decorated if any(command.search(ast.unparse(d)) for d in f.decorator_list)]
    long = {f.name: f.end_lineno - f.body[0].end_lineno for f in commands if f.end_lineno - f.body[0].end_lineno > 20}
    assert len(commands) >= 6 and long == {}
