"""The terminal report says what it means: headers name what their column shows, each verdict names what fails,
money and memory are written as everywhere else (thousands separators, currency), and a bound never reads above
the plan it bounds (QA review of the report text)."""

from __future__ import annotations

import json
import math
import re

import yaml

from tests.conftest import REPO

SEVENTY_B = REPO / "scenarios" / "70b.yaml"
RTX_3060_MB8 = ("--gpu", "RTX-3060", "--cards", "1", "--micro-batch", "8")


def _text(result) -> str:
    return " ".join(result.stdout.split())  # rich wraps long lines


def test_the_memory_table_header_names_the_unit_it_shows(run_cli):
    out = run_cli("estimate", REPO / "scenarios" / "7b-lora.yaml", *RTX_3060_MB8).stdout
    header = next(line for line in out.splitlines() if line.lstrip().startswith("component"))
    assert "bytes" not in header and "per GPU" in header
    assert re.search(r"total\s+│\s+[\d,.]+ GiB", out)


A100_OFFLOAD = ("--gpu", "A100-80G", "--cards", "8", "--zero", "3", "--offload", "optimizer", "--micro-batch", "1",
                "--checkpointing", "full")  # fmt: skip


def test_an_estimate_short_of_host_ram_says_the_gpu_fits_and_the_node_does_not(run_cli, tmp_path):
    # 70B on 8 x A100-80G of AutoDL (seed002): 38.3 GiB per card (48%) fits, but the offloaded optimizer states
    # need 1,577 GiB + 8 x 4 GiB of processes = 1,609 GiB per node against the default 29.8 GiB x 8 = 238 GiB
    result = run_cli("estimate", SEVENTY_B, *A100_OFFLOAD)
    text = _text(result)
    assert result.exit_code == 1
    assert "Memory: fits on the GPU; host RAM does NOT: 1,609 GiB needed per node, 238 GiB on the node." in text
    assert "DOES NOT FIT" not in text and "fits at the high end too" in text
    doc = json.loads(run_cli("estimate", SEVENTY_B, *A100_OFFLOAD, "--json").stdout)
    m = doc["memory"]
    assert doc["status"] == "infeasible" and m["fits"] is True and m["host_ram_fits"] is False
    assert m["host_ram_needed"] > doc["offer"]["host_ram_bytes"]
    page = tmp_path / "e.html"
    run_cli("estimate", SEVENTY_B, *A100_OFFLOAD, "--html", page)
    html = page.read_text(encoding="utf-8")
    assert "fits on the GPU" in html and "Host RAM DOES NOT FIT: 1,609.0 GiB needed per node, 238.4 GiB" in html


def test_an_estimate_over_the_card_says_so_and_a_fitting_one_has_host_ram_fits(run_cli):
    over = json.loads(run_cli("estimate", REPO / "scenarios" / "7b-lora.yaml", *RTX_3060_MB8, "--json").stdout)
    assert over["memory"]["fits"] is False and over["memory"]["host_ram_fits"] is True
    assert "Memory: DOES NOT FIT on the GPU." in _text(run_cli("estimate", REPO / "scenarios" / "7b-lora.yaml",
                                                               *RTX_3060_MB8))  # fmt: skip


def test_the_estimate_help_examples_show_configurations_that_fit(run_cli):
    from optimizer.cli.commands import ESTIMATE_EXAMPLES

    examples = " ".join(ESTIMATE_EXAMPLES.replace("\\\n", " ").split("Examples:")[1].split()).split("ftopt ")[1:]
    assert len(examples) == 2
    for example in examples:
        args = [a.replace("scenarios/", f"{REPO}/scenarios/") for a in example.split()]
        assert run_cli(*args).exit_code == 0, example


def test_a_proven_bound_is_money_and_never_above_the_plans_cost(run_cli):
    # 70B stopped at once: the plan costs 1,124.12 USD = 7,608.69 CNY; CP-SAT's bound is 760,870 whole cents, which
    # only proves every plan costs more than 760,869 cents (each plan's cents are rounded up): 7,608.69 CNY
    text = _text(run_cli("solve", SEVENTY_B, "--time-limit", "0.001"))
    plan = float(re.search(r"\(= ([\d,.]+) CNY\)", text).group(1).replace(",", ""))
    bound = re.search(r"proven bound ([\d,.]+) CNY", text)
    assert bound is not None and "," in bound.group(1)  # thousands separator, currency
    assert float(bound.group(1).replace(",", "")) <= plan
    doc = json.loads(run_cli("solve", SEVENTY_B, "--time-limit", "0.001", "--json").stdout)
    assert doc["bound"]["unit"] == "CNY" and doc["bound"]["value"] <= doc["cost"]["budget_currency_total"]


def test_bound_value_rounds_down_past_the_solvers_rounding_up():
    from optimizer.inputs.schema import Objective
    from optimizer.solve.planner import bound_value

    # 760,870 cents -> above 760,869 cents; a fractional bound 760,869.2 means at least 760,870 whole cents
    assert bound_value(760870, Objective.cost) == 7608.69 == bound_value(760869.2, Objective.cost)
    # 17,000 s -> above 16,999 s = 4.7219 h -> 4.72 h; nothing below zero
    assert bound_value(17000, Objective.time) == 4.72 and bound_value(0, Objective.cost) == 0.0


def _my_lora(tmp_path):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    path = tmp_path / "my-lora.yaml"
    path.write_text(readme.split("# file: my-lora.yaml\n", 1)[1].split("```", 1)[0], encoding="utf-8")
    return path


def test_the_impossible_job_lists_every_front_point_pareto_has_each_rounded_up(run_cli, tmp_path):
    # README step 5: 9 plans on the front; the message listed 8 ("of 9 plans on the front") and left one out
    path = _my_lora(tmp_path)
    text = _text(run_cli("solve", path, "--budget", "1", "--deadline-hours", "0.2"))
    listed = re.findall(r"([\d,]+\.\d\d) USD / ([\d,]+\.\d\d) h", text.split("admits a plan:", 1)[1])
    front = json.loads(run_cli("pareto", path, "--json").stdout)["points"]
    assert len(listed) == len(front) == 9 and "each rounded up" in text
    for (cost, hours), point in zip(listed, sorted(front, key=lambda p: -p["front"]["hours"]), strict=True):
        # a limit rounded up to admit the plan: at or above pareto's nearest-rounded figure, by under a cent / 0.01 h
        assert 0 <= float(cost) - point["front"]["cost"] < 0.0101
        assert 0 <= float(hours) - point["front"]["hours"] < 0.0101


def test_nothing_fits_writes_gib_with_separators_and_suggests_only_what_changes_something(run_cli, tmp_path):
    # seq_len 10,000,000 on the README's LoRA job: 24,035.8 GiB per GPU; it is lora already, so lora is no advice
    path = _my_lora(tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace("seq_len: 2048", "seq_len: 10000000"), encoding="utf-8")
    text = _text(run_cli("solve", path))
    assert "the smallest needs 24,035.8 GiB per GPU" in text and not re.search(r"\d{4}\.\d GiB", text)
    assert text.rstrip().endswith("no GPU in the catalog fits: shorten seq_len or use qlora")


def test_memory_advice_names_only_lighter_methods_and_the_pins_set(write_scenario):
    from optimizer.inputs.catalog import load_scenario
    from optimizer.solve.explain import memory_advice

    full = load_scenario(write_scenario("f.yaml", method="full", lora=None, plan={"cards": 2, "offload": "none"}))
    qlora = load_scenario(write_scenario("q.yaml", method="qlora"))
    assert memory_advice(full) == "shorten seq_len, use lora or qlora or unpin cards, offload"
    assert memory_advice(qlora) == "shorten seq_len"


def test_the_readme_walkthrough_explains_the_slow_end_line_its_first_plan_prints(run_cli, tmp_path):
    # README step 1 explains "deadline MISSED" at the slow end and says risk_limits: true holds it there
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    path = _my_lora(tmp_path)
    first = _text(run_cli("solve", path))
    assert "1 x RTX-4090" in first and "one RTX 4090" in readme
    assert "at the slow end: deadline MISSED, budget met; risk_limits: true chooses a plan that holds" in first
    assert "at the slow end: deadline MISSED, budget met; risk_limits: true chooses a plan" in readme
    path.write_text(path.read_text(encoding="utf-8") + "risk_limits: true\n", encoding="utf-8")
    robust = _text(run_cli("solve", path))
    assert "2 x L40S" in robust and "at the slow end: deadline met, budget met" in robust
    assert "two L40S cards" in readme


def test_other_gpu_types_read_in_the_plans_currencies_and_the_missing_ones_are_named(run_cli, tmp_path):
    # 70B: the plan is on a USD offer (Cost: ... USD (= ... CNY)); A100-80G's best is also billed in USD; A800-80G
    # and H20 fit their cards on cn offers whose nodes lack the host RAM; no catalog offers the H800
    result = run_cli("solve", SEVENTY_B, "--html", tmp_path / "s.html")
    text = _text(result)
    table = text.split("Best plan on each other GPU type", 1)[1]
    assert re.search(r"A100-80G .*? [\d,]+\.\d\d USD \(= [\d,]+\.\d\d CNY\)", table)
    assert "cost (CNY)" not in table
    line = ("No plan on the other allowed GPU types: A800-80G, H20 (configurations that fit their cards need more "
            "host RAM than their nodes have); H800 (no offer in the catalog)")
    assert line in text
    assert line.replace("(", "").replace(")", "")[:60] in (tmp_path / "s.html").read_text(encoding="utf-8").replace(
        "(", "").replace(")", "")  # the page says it too


def test_no_plan_reasons_name_the_limits_when_candidates_exist(tmp_path):
    from optimizer.solve.planner import solve_scenario

    # a budget that only the cheapest GPU type meets: the others have candidates but none within the limits
    doc = yaml.safe_load((REPO / "scenarios" / "7b-lora.yaml").read_text(encoding="utf-8"))
    first = solve_scenario(REPO / "scenarios" / "7b-lora.yaml")
    # rounded up: the total is to the cent, and total x 1.001 rounded to the cent can fall back under the unrounded
    # bill the solver compares (7b-lora: 4.46 USD -> a budget of 4.46, infeasible)
    budget = math.ceil(first.best.cost.total * 1.001 * 100) / 100
    doc["budget"] = {"amount": budget, "currency": first.best.cost.currency}
    doc["allow"] = {"gpus": [first.best.plan.gpu, *sorted({a.plan.gpu for a in first.alternatives})[:2]]}
    path = tmp_path / "tight.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = solve_scenario(path)
    others = set(doc["allow"]["gpus"]) - {result.best.plan.gpu} - {a.plan.gpu for a in result.alternatives}
    assert others and {gpu: "limits" for gpu in others} == dict(result.no_plan)


def _capped_70b(tmp_path, cap: int = 500):
    doc = yaml.safe_load(SEVENTY_B.read_text())
    doc["allow"]["max_host_memory_gib"] = cap
    path = tmp_path / "70cap.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_host_ram_cap_is_named_where_it_fails_not_the_nodes_ram(run_cli, tmp_path):
    # allow.max_host_memory_gib 500 on a 1,800 GiB node: it read "1,609 GiB needed per node, 1,800 GiB on the node"
    # and DOES NOT (a contradiction); the cap is what fails
    path = _capped_70b(tmp_path)
    pins = ("--gpu", "H100-SXM", "--offer", "lambda-gpu_8x_h100_sxm5-us-east-1", "--cards", "8", "--zero", "3",
            "--offload", "optimizer", "--micro-batch", "1", "--checkpointing", "full")  # fmt: skip
    text = _text(run_cli("estimate", path, *pins))
    assert "host RAM does NOT: " in text and "offloaded per node, over allow.max_host_memory_gib (500 GiB)" in text
    assert "on the node" not in text
    doc = json.loads(run_cli("estimate", path, *pins, "--json").stdout)
    assert doc["memory"]["host_ram_limit"] == 500 * 2**30 and doc["memory"]["host_ram_fits"] is False
    plain = json.loads(run_cli("estimate", SEVENTY_B, *pins, "--json").stdout)
    assert plain["memory"]["host_ram_limit"] is None


def test_gpu_types_held_back_by_the_host_ram_cap_say_so(run_cli, tmp_path):
    # they were filed under "no configuration fits in their memory", though configurations fit their cards
    text = _text(run_cli("solve", _capped_70b(tmp_path)))
    line = text.split("No plan on the other allowed GPU types: ")[1]
    assert line.startswith("A800-80G, H20 (configurations that fit their cards offload more than "
                           "allow.max_host_memory_gib)")  # fmt: skip
