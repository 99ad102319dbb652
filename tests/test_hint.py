"""The fused-loss hint on a solved plan (optimizer/solve/hint.py): when it is looked for, and what it reports.

The hinted plan is checked against an independent answer: ftopt solving a copy of the scenario that sets
``training.loss: fused`` itself. Whether a second solve happens is counted with a spy on the re-solve.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from optimizer.inputs.schema import Objective
from optimizer.solve import hint
from optimizer.solve.planner import Overrides, solve_scenario

from .conftest import REPO

SCENARIOS = REPO / "scenarios"


def _copy(tmp_path: Path, name: str, out: str = "copy.yaml", seq_len: int | None = None, **training: object) -> Path:
    """scenarios/NAME with ``training`` keys (and seq_len) set, as OUT (catalog and model are built-in names)."""
    doc = yaml.safe_load((SCENARIOS / name).read_text(encoding="utf-8"))
    doc["training"] = {**doc["training"], **training}
    if seq_len is not None:
        doc["seq_len"] = seq_len
    path = tmp_path / out
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def re_solves(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """The (setting, value) of every second solve the hint makes."""
    calls: list[tuple[str, object]] = []
    real = hint.solve_with_setting

    def spy(*args, **kwargs):
        calls.append((args[5], args[6]))
        return real(*args, **kwargs)

    monkeypatch.setattr(hint, "solve_with_setting", spy)
    return calls


def test_32b_lora_is_told_the_fused_loss_plan_a_fused_copy_of_it_solves_to(tmp_path, re_solves):
    result = solve_scenario(SCENARIOS / "32b-lora.yaml")
    fused = solve_scenario(_copy(tmp_path, "32b-lora.yaml", loss="fused")).best
    h, best = result.hint, result.best
    assert re_solves == [("training.loss", "fused")]
    assert h is not None and (h["setting"], h["value"], h["objective"]) == ("training.loss", "fused", "cost")
    # the logits are the premise: 13.9 GiB of a 30.9 GiB peak on the standard loss
    assert best.memory.logits >= 0.25 * best.memory.total
    assert (h["cost"], h["currency"], h["hours"]) == (fused.cost.total, fused.cost.currency, fused.time.hours)
    assert (h["logits_bytes"], h["plan_logits_bytes"]) == (fused.memory.logits, best.memory.logits)
    assert fused.cost.total < best.cost.total and h["saving"] >= 0.01
    assert h["saving"] == pytest.approx(1 - fused.cost.total / best.cost.total, abs=1e-3)  # the printed costs, rounded
    changed = {c["field"]: (c["from"], c["to"]) for c in h["changes"]}
    assert changed == {k: (getattr(best.plan, k), getattr(fused.plan, k)) for k in hint.FIELDS
                       if getattr(best.plan, k) != getattr(fused.plan, k)}  # fmt: skip
    assert changed["offload"] == ("all", "none")  # the fused loss leaves room to keep the states on the cards


def test_the_hint_keeps_the_command_lines_objective(tmp_path, re_solves):
    """--objective time: the second solve minimises hours too, as the fused copy solved with the same flag does.

    7b-lora at 32K tokens per row: the fp32 logits are 94 GiB of its peak. Its fastest fused plan (64 H100-SXM) is
    not its cheapest (4 L40S), so a second solve that dropped the flag would report another plan.
    """
    long = _copy(tmp_path, "7b-lora.yaml", "long.yaml", seq_len=32768)
    fused = _copy(tmp_path, "7b-lora.yaml", "fused.yaml", seq_len=32768, loss="fused")
    ov = Overrides(objective=Objective.time)
    fast, cheap = solve_scenario(long, ov).hint, solve_scenario(long).hint
    fastest, cheapest = solve_scenario(fused, ov).best, solve_scenario(fused).best
    assert re_solves == [("training.loss", "fused")] * 2
    assert fast is not None and cheap is not None and fast["objective"] == "time"
    assert (fast["hours"], fast["cost"]) == (fastest.time.hours, fastest.cost.total)
    assert (cheap["hours"], cheap["cost"]) == (cheapest.time.hours, cheapest.cost.total)
    assert fast["hours"] < cheap["hours"]  # the two objectives pick different plans


def test_small_logits_get_no_hint_and_no_second_solve(re_solves, monkeypatch):
    result = solve_scenario(SCENARIOS / "14b-lora.yaml")
    m = result.best.memory
    assert m.logits < 0.25 * m.total  # 11% of the peak: below calibration hints.fused_loss.logits_share
    assert result.hint is None and re_solves == []
    # the share is what held it back: at a threshold under the plan's 11% the same scenario is solved again
    monkeypatch.setattr(hint, "rule", lambda calibration: {"logits_share": 0.10, "min_saving": 0.01})
    solve_scenario(SCENARIOS / "14b-lora.yaml")
    assert re_solves == [("training.loss", "fused")]


def test_an_explicit_standard_loss_is_kept_without_a_hint(tmp_path, re_solves):
    pinned = solve_scenario(_copy(tmp_path, "32b-lora.yaml", loss="standard"))
    assert pinned.hint is None and re_solves == []
    left_out = solve_scenario(SCENARIOS / "32b-lora.yaml")
    assert pinned.best.plan == left_out.best.plan  # the same loss: the pin alone holds the hint back
    assert left_out.hint is not None and re_solves == [("training.loss", "fused")]


def test_a_lora_adapter_on_lm_head_gets_no_fused_loss_hint(tmp_path, re_solves):
    """Liger's fused loss would never train an lm_head adapter (engines.fused_loss_refusal): no hint to offer."""
    doc = yaml.safe_load((SCENARIOS / "32b-lora.yaml").read_text(encoding="utf-8"))
    head = tmp_path / "head.yaml"
    head.write_text(yaml.safe_dump({**doc, "lora": {**doc["lora"], "targets": [*doc["lora"]["targets"], "lm_head"]}},
                                   sort_keys=False), encoding="utf-8")  # fmt: skip
    result = solve_scenario(head)
    assert result.best.memory.logits >= 0.25 * result.best.memory.total  # the logits alone would ask for it
    assert result.hint is None and re_solves == []
    assert solve_scenario(SCENARIOS / "32b-lora.yaml").hint is not None  # without the adapter on lm_head: a hint


def test_the_json_has_the_hint_and_the_text_prints_it(run_cli):
    doc = json.loads(run_cli("solve", SCENARIOS / "32b-lora.yaml", "--json").stdout)
    keys = list(doc)
    assert keys[keys.index("trade_off") + 1] == "hint"
    assert doc["hint"]["value"] == "fused" and doc["hint"]["currency"] == doc["cost"]["currency"]
    assert doc["hint"]["cost"] < doc["cost"]["total"]
    text = run_cli("solve", SCENARIOS / "32b-lora.yaml").stdout
    assert "Hint: training.loss: fused (Liger's fused linear cross-entropy" in text
    assert f"{doc['hint']['cost']:,.2f} USD" in text
    none = json.loads(run_cli("solve", SCENARIOS / "14b-lora.yaml", "--json").stdout)
    assert "hint" in none and none["hint"] is None
    assert "Hint:" not in run_cli("solve", SCENARIOS / "14b-lora.yaml").stdout


def test_a_hinted_bill_reads_as_the_cost_line_does(tmp_path):
    """70b-qlora rents in CNY and budgets in USD: its Cost line writes '182.40 CNY (= 26.95 USD)', and the hint
    writes the fused plan's bill the same way, the offer's currency first (it wrote USD alone)."""
    result = solve_scenario(SCENARIOS / "70b-qlora.yaml")
    fused = solve_scenario(_copy(tmp_path, "70b-qlora.yaml", loss="fused")).best
    h = result.hint
    assert h is not None and (h["offer_cost"], h["offer_currency"]) == (fused.cost.total, fused.cost.currency)
    assert h["currency"] != h["offer_currency"]
    assert h["text"].split(" plans ")[1].startswith(f"{fused.cost.total:,.2f} {fused.cost.currency} (= ")
