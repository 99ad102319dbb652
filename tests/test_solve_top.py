"""``ftopt solve --top N --json``: the next best plans the text lists are in the document (``next_best``).

docs/json-contract.md: with N > 1 and a plan, ``next_best`` holds plans #2..#N in the text's order, each a plan
document; without --top the document is unchanged (no key), and an infeasible answer has none.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from .conftest import REPO

SCENARIO = REPO / "scenarios" / "7b-lora.yaml"  # 8B LoRA on the us catalog: many offers fit, so #2 and #3 exist
# "#2: 1 x RTX-4090 (1 node, offer akash-rtx-4090); ...; 15.4 h; 6.24 USD": the text's entry for each next best plan
# (wrapped over lines at 120 columns)
LINE = re.compile(r"^#(\d+): (\d+) x (\S+) \(\d+ nodes?, offer (\S+)\);.*?; ([\d,.]+) h; ([\d,.]+) (\w+)$", re.M | re.S)


@pytest.fixture(scope="module")
def top3() -> tuple[dict, str]:
    """(--top 3 --json document, --top 3 text) of SCENARIO."""
    from click.testing import CliRunner

    from optimizer.cli.commands import cli

    runner = CliRunner()
    doc = runner.invoke(cli, ["solve", str(SCENARIO), "--top", "3", "--json"], catch_exceptions=False)
    text = runner.invoke(cli, ["solve", str(SCENARIO), "--top", "3"], catch_exceptions=False)
    assert doc.exit_code == text.exit_code == 0, (doc.output, text.output)
    return json.loads(doc.stdout), text.stdout


def test_top_json_lists_the_plans_the_text_lists_after_the_best(top3):
    doc, text = top3
    lines = LINE.findall(text)
    assert [n for n, *_ in lines] == ["2", "3"], text
    assert len(doc["next_best"]) == 2
    for (_, cards, gpu, offer, hours, cost, currency), alt in zip(lines, doc["next_best"], strict=True):
        assert (alt["plan"]["cards"], alt["plan"]["gpu"], alt["plan"]["offer"]) == (int(cards), gpu, offer)
        assert f"{alt['time']['hours']:,.1f}" == hours
        assert (f"{alt['cost']['total']:,.2f}", alt["cost"]["currency"]) == (cost, currency)


def test_top_json_leaves_the_best_plan_out_and_repeats_no_plan(top3):
    doc, _ = top3
    plans = [doc["plan"], *(a["plan"] for a in doc["next_best"])]
    assert len({json.dumps(p, sort_keys=True) for p in plans}) == 3
    for alt in doc["next_best"]:  # each a whole plan document, as the best one is
        assert {"status", "plan", "memory", "time", "cost", "uncertainty", "offer"} <= set(alt)
        assert alt["status"] in ("optimal", "feasible") and alt["memory"]["fits"] is True


def test_an_alternative_is_accepted_back_by_estimate_with_the_same_numbers(top3, run_cli, tmp_path):
    doc, _ = top3
    alt = doc["next_best"][0]
    scenario = yaml.safe_load(SCENARIO.read_text())
    scenario["plan"] = {k: v for k, v in alt["plan"].items() if k not in ("billed_units", "attention")}
    path = tmp_path / "pinned.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    res = run_cli("estimate", path, "--json")
    assert res.exit_code == 0, res.stderr
    est = json.loads(res.stdout)
    assert (est["time"]["hours"], est["cost"]["total"]) == (alt["time"]["hours"], alt["cost"]["total"])


def test_without_top_the_document_is_unchanged(run_cli):
    plain = run_cli("solve", SCENARIO, "--json")
    one = run_cli("solve", SCENARIO, "--top", "1", "--json")
    assert plain.exit_code == one.exit_code == 0
    assert plain.stdout == one.stdout
    assert "next_best" not in json.loads(plain.stdout)


def test_an_infeasible_solve_with_top_has_no_next_best(run_cli):
    res = run_cli("solve", SCENARIO, "--budget", "0.01", "--top", "3", "--json")
    doc = json.loads(res.stdout)
    assert (res.exit_code, doc["status"]) == (1, "infeasible")
    assert "next_best" not in doc and "explanation" in doc


def test_top_asking_for_more_plans_than_the_limits_admit_gives_what_there_is(run_cli, write_scenario):
    # one GPU, one card, one offer: the pins leave a single plan, so --top 3 lists no other
    path = write_scenario(catalog="us", plan={"offer": "akash-rtx-4090", "cards": 1, "micro_batch": 1,
                                              "zero_stage": 3, "checkpointing": "full", "offload": "all"})
    res = run_cli("solve", path, "--top", "3", "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["plan"]["offer"] == "akash-rtx-4090" and doc["next_best"] == []
