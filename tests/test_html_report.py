"""``--html FILE``: structure, values drawn, escaping, determinism, self-containment, and untouched text/JSON output.

The browser checks (console errors, network requests, hover, screenshots) are the .ci/html-check tier.
"""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

from optimizer.report.html.html_plan import money_cell_text, why_lost
from optimizer.report.html.html_portfolio import card_rows, window_rows
from optimizer.report.html.html_shell import esc

from .conftest import REPO, scenario_doc

HOSTILE = "<script>alert(\"x\")</script> & 'q'"


class Page(HTMLParser):
    """Every element as (tag, attributes) in document order, and the text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.texts.append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        """Elements of ``tag`` whose attributes contain ``attrs`` (class matched as one of the classes)."""
        out = []
        for t, a in self.elements:
            if t != tag:
                continue
            ok = all((v in a.get("class", "").split()) if k == "cls" else a.get(k) == v for k, v in attrs.items())
            if ok:
                out.append(a)
        return out

    def sections(self) -> list[str]:
        return [a["id"] for a in self.find("section")]


@pytest.fixture(scope="module")
def hostile_scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test scenario named with markup, an ampersand and both quotes, with a budget and a deadline."""
    path = tmp_path_factory.mktemp("html") / "hostile.yaml"
    doc = scenario_doc(name=HOSTILE, budget={"amount": 400, "currency": "USD"}, deadline_hours=30)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def solved(hostile_scenario: Path) -> Any:
    from optimizer.solve.planner import solve_scenario

    return solve_scenario(hostile_scenario)


@pytest.fixture(scope="module")
def front(hostile_scenario: Path) -> Any:
    from optimizer.solve.pareto import pareto_scenario

    return pareto_scenario(hostile_scenario)


@pytest.fixture(scope="module")
def portfolio_result() -> Any:
    from optimizer.portfolio.plan import plan_portfolio

    return plan_portfolio(REPO / "portfolios" / "team-q1.yaml")


def _self_contained(text: str) -> None:
    """No reference to anything outside the file: no src/href, no url(), no @import, no scheme but the SVG one."""
    page = Page(text)
    assert not [a for _, a in page.elements if "src" in a or "href" in a]
    assert "url(" not in text and "@import" not in text
    assert set(re.findall(r"[a-z]+://[^\s\"'<>]*", text)) <= {"http://www.w3.org/2000/svg"}
    assert len(text.encode()) < 3_000_000


def test_solve_page_has_every_section_and_draws_the_memory_bar_to_scale(solved):
    from optimizer.report.html import solve_page

    text = solve_page(solved)
    page = Page(text)
    assert page.sections() == ["plan", "memory", "time-cost", "alternatives"]
    _self_contained(text)
    m = solved.best.memory
    parts = page.find("rect", cls="part")
    assert len(parts) == 6
    widths = [float(r["width"]) for r in parts]
    components = [m.weights, m.gradients, m.optimizer, m.activations, m.logits, m.overhead]
    for w, c in zip(widths, components, strict=True):  # each segment's share of the bar is the component's share
        assert w / sum(widths) == pytest.approx(c / m.total, abs=0.002)
    # the usable line sits at capacity x (1 - headroom) on the bar's scale (0 bytes at x = 20 px)
    usable, card = (float(a["x1"]) - 20 for t, a in page.elements if t == "line" and (a.get("y1"), a.get("y2")) ==
                    ("28", "68"))  # fmt: skip
    assert usable / card == pytest.approx(1 - solved.scenario.headroom, abs=0.003)
    assert f"{m.total / 2**30:,.1f} GiB" in text
    # one sortable row per other GPU type, each saying why it lost
    table = text.split('id="alternatives-table" class="sortable"')[1].split("</table>")[0]
    assert table.count("<tr>") - 1 == len(solved.alternatives) > 0
    reasons = ('data-v="costs ', 'data-v="same cost', "cheaper but")
    assert sum(table.count(r) for r in reasons) == len(solved.alternatives)


def test_every_user_string_is_escaped(solved, front):
    from optimizer.report.html import batch_page, pareto_page, solve_page

    row = {"scenario": f"dir/{HOSTILE}.yaml", "name": HOSTILE, "status": "error", "error": HOSTILE}
    for text in (solve_page(solved), pareto_page(front), batch_page([row])):
        assert "<script>alert" not in text
        assert text.count("<script>") == 1  # the page's own script only
        assert esc(HOSTILE) in text
        assert HOSTILE in "".join(Page(text).texts)  # and reads back as the name itself


def test_front_marks_the_chosen_plan_and_places_points_by_cost_and_hours(front):
    from optimizer.report.front import pareto_json
    from optimizer.report.html import pareto_page

    text = pareto_page(front)
    page = Page(text)
    assert page.sections() == ["front", "plan", "memory", "time-cost"]
    _self_contained(text)
    dots = page.find("circle", cls="dot")
    doc = pareto_json(front)
    assert len(dots) == len(doc["points"])
    chosen = [d for d in dots if "chosen" in d["class"].split()]
    assert len(chosen) == 1 and chosen[0]["id"] == f"dot-{doc['chosen']}"
    plan = doc["points"][doc["chosen"]]["plan"]
    assert f"{plan['gpu']} x {plan['cards']} ({plan['offer']})" in chosen[0]["data-tip"]
    # screen y falls as cost rises, screen x grows with hours
    ys = [float(d["cy"]) for d in dots]
    xs = [float(d["cx"]) for d in dots]
    for i in range(len(dots)):
        for j in range(len(dots)):
            if front.costs[i] < front.costs[j] - 1e-9:
                assert ys[i] > ys[j]
            if front.hours[i] < front.hours[j] - 1e-9:
                assert xs[i] < xs[j]
    near = 30 <= 1.5 * max(front.hours)  # a limit line is drawn within 1.5x of the front, else only named
    assert bool(page.find("g", cls="deadline")) == near
    assert "deadline 30 h" + ("" if near else " lies beyond every plan and is not drawn") in text.lower()


def test_why_lost_names_the_objective_gap_first():
    def doc(cost: float, hours: float, fits_p90: bool = True) -> dict[str, Any]:
        return {"cost": {"total": cost, "budget_currency_total": None}, "time": {"hours": hours},
                "uncertainty": {"memory": {"fits_p90": fits_p90}}}

    best = doc(8.0, 10.0)
    assert why_lost(doc(10.0, 5.0), best, "cost", "USD") == "costs 2.00 USD more (-5.00 h)"  # not "+2.00 ... more"
    assert why_lost(doc(8.0, 12.0), best, "cost", "USD") == "same cost, +2.00 h"
    assert why_lost(doc(6.0, 12.5), best, "time", "USD") == "slower by 2.50 h"
    # cheaper yet lost: the tolerance chose the faster plan (it had read "same cost" for 123.20 against 123.60 CNY)
    assert why_lost(doc(7.6, 21.26), best, "cost", "CNY") == (
        "0.40 CNY cheaper but 11.26 h slower (within the tolerance, the faster was chosen)")
    assert why_lost(doc(9.0, 9.0), best, "time", "USD").startswith("1.00 h faster but +1.00 USD")
    lost = why_lost(doc(9.0, 11.0, False), best, "cost", "USD")
    assert lost.endswith("over the usable memory at the 90th-percentile peak")


def test_gantt_gives_each_card_its_own_row_and_never_overlaps_two_jobs_on_one_card():
    job = lambda name, start, end, cards: {  # noqa: E731
        "name": name, "occurrence": 0, "start_hours": start, "end_hours": end, "gpu": "RTX-4090", "cards": cards,
        "where": "owned", "offer": None,
        "plan": {"tp": 1, "dp": cards, "zero_stage": 0, "offload": "none", "micro_batch": 1, "grad_accum": 1,
                 "checkpointing": "none"}}  # fmt: skip
    doc = {"utilisation": [{"where": "owned", "gpu": "RTX-4090", "cards": 2}], "purchases": [], "rentals": [],
           "cost": {"currency": "CNY"},
           "jobs": [job("a", 0, 24, 2), job("b", 24, 48, 1), job("c", 30, 40, 1), job("d", 48, 72, 2)]}
    rows, bars = card_rows(doc)
    assert rows == ["owned RTX-4090 card 1", "owned RTX-4090 card 2"]
    lanes = {}
    for b in bars:
        lanes.setdefault(b.text.split(" #")[0], []).append(b.row)
    assert lanes == {"a": [0, 1], "b": [0], "c": [1], "d": [0, 1]}
    for r in (0, 1):
        spans = sorted((b.start, b.end) for b in bars if b.row == r)
        assert all(s1[1] <= s2[0] for s1, s2 in zip(spans, spans[1:], strict=False))
    windows = {("a", 0): (0.0, 2.0), ("b", 0): (1.0, 3.0), ("c", 0): (0.5, 4.0), ("d", 0): (2.0, 4.0)}
    more, wbars = window_rows(doc, windows, 2)  # one row per occurrence, in release order, after the card rows
    assert more == ["window a #0", "window c #0", "window b #0", "window d #0"]
    assert [(b.row, b.start, b.end) for b in wbars if b.cls == "window"] == [(2, 0.0, 2.0), (3, 0.5, 4.0),
                                                                             (4, 1.0, 3.0), (5, 2.0, 4.0)]


def test_portfolio_page_draws_rows_per_card_and_instance_windows_in_days_and_the_cost(portfolio_result):
    from optimizer.report.html import portfolio_page

    text = portfolio_page(portfolio_result, str(REPO / "portfolios" / "team-q1.yaml"))
    page = Page(text)
    assert page.sections() == ["schedule", "portfolio-cost", "break-even"]
    _self_contained(text)
    # team-q1.yaml: exp-14b-a is released on day 5 and due on day 25; the axis runs 0-90 days over 730 px from the
    # label margin (the lane labels end 8 px left of it)
    left = float(page.find("text", cls="lane")[0]["x"]) + 8
    tip = next(a for a in page.find("rect", cls="window") if a["data-tip"].startswith("exp-14b-a #0"))
    x0, width = float(tip["x"]), float(tip["width"])
    assert (x0, x0 + width) == (pytest.approx(left + 5 / 90 * 730, abs=0.1),
                                pytest.approx(left + 25 / 90 * 730, abs=0.1))  # fmt: skip
    owned = sum(u["cards"] for u in portfolio_result.utilisation if u["where"] == "owned")
    assert text.count(">owned RTX-4090 card ") == owned
    assert text.count(">rented ") == len(portfolio_result.rentals)
    assert f"{portfolio_result.cost['total']:,.2f} CNY" in text


def test_batch_page_has_a_row_per_scenario_with_status_filter_and_sort():
    from optimizer.report.html import batch_page

    rows = [{"scenario": "a.yaml", "name": "a", "status": "optimal", "gpu": "L40S", "cards": 2, "tp": 1, "dp": 2,
             "zero_stage": 2, "offload": "none", "micro_batch": 4, "grad_accum": 4, "checkpointing": "none",
             "cost": "12.5", "currency": "USD", "hours": 3.25, "cost_p90": 15.0, "hours_p90": 4.0, "fits_p90": True,
             "error": None},
            {"scenario": "b.yaml", "name": "b", "status": "infeasible", "error": "budget binds"}]  # fmt: skip
    page = Page(batch_page(rows))
    assert page.sections() == ["batch"]
    trs = page.find("tr", **{"data-status": "optimal"}) + page.find("tr", **{"data-status": "infeasible"})
    assert len(trs) == 2
    assert page.find("table", id="batch-table", cls="sortable") and page.find("input", id="batch-filter")
    cells = [a.get("data-v") for t, a in page.elements if t == "td"]
    assert "12.5" in cells and "15.0" in cells and "-1.0" in cells  # numbers sort as numbers; missing sorts first


@pytest.mark.parametrize("args", [
    ("solve", "{scenario}"),
    ("estimate", "{scenario}", "--gpu", "L40S", "--cards", "1", "--micro-batch", "1"),
    ("pareto", "{scenario}"),
    ("portfolio", str(REPO / "portfolios" / "team-q1.yaml")),
])  # fmt: skip
def test_html_leaves_text_and_json_unchanged_and_is_byte_identical(run_cli, hostile_scenario, tmp_path, args):
    args = tuple(a.format(scenario=hostile_scenario) for a in args)
    for extra in ((), ("--json",)):
        plain = run_cli(*args, *extra)
        with_html = run_cli(*args, *extra, "--html", tmp_path / "a.html")
        assert (with_html.exit_code, with_html.stdout) == (plain.exit_code, plain.stdout)
        if extra:
            json.loads(plain.stdout)
    run_cli(*args, "--html", tmp_path / "b.html")
    first = (tmp_path / "a.html").read_bytes()
    assert first == (tmp_path / "b.html").read_bytes()
    assert first.startswith(b"<!DOCTYPE html>")


def test_batch_html_leaves_the_results_file_unchanged(run_cli, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for name in ("7b-lora.yaml", "7b-qlora.yaml"):
        (src / name).write_text((REPO / "scenarios" / name).read_text())
    plain = run_cli("batch", src, "-o", tmp_path / "a.jsonl", "--workers", "1")
    with_html = run_cli("batch", src, "-o", tmp_path / "b.jsonl", "--workers", "1", "--html", tmp_path / "b.html")
    assert plain.exit_code == with_html.exit_code == 0
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    page = Page((tmp_path / "b.html").read_text())
    assert len(page.find("tr", **{"data-status": "optimal"})) == 2


def test_plan_shows_how_the_offer_is_sold_and_the_instances_rented_when_the_catalog_says():
    from optimizer.report.html.html_plan import plan_facts

    plan = {"gpu": "H100-SXM", "offer": "x", "cards": 24, "nodes": 3, "tp": 8, "pp": 1, "dp": 3, "zero_stage": 1,
            "offload": "none", "micro_batch": 1, "grad_accum": 4, "precision": "bf16", "optimizer": "adamw",
            "checkpointing": "none", "term": "hour", "billed_units": {"hour": 5}, "attention": "flash"}
    offer = {"id": "x", "provider": "P & Co", "currency": "USD", "prices": {}}
    facts = dict(plan_facts({"plan": plan, "offer": {**offer, "sold_as": "instance", "cards_per_instance": 8}}))
    assert facts["Sold as"] == "instance; 8 cards per instance: 3 instances"
    assert facts["Offer"] == "x from P &amp; Co"
    assert "Sold as" not in dict(plan_facts({"plan": plan, "offer": offer}))  # older catalogs: nothing invented
    assert facts["Batch"].endswith("= 12 sequences per optimizer step")  # 1 x 4 x 3


def test_currency_conversion_names_the_rate_its_source_and_date(catalog):
    from optimizer.report.html.html_plan import fx_line

    rate = catalog.rate("USD", "CNY")
    line = fx_line({"total": 10.0, "currency": "USD", "budget_currency_total": 10.0 * rate.rate,
                    "budget_currency": "CNY"})  # fmt: skip
    assert line == (f"10.00 USD = {10 * rate.rate:,.2f} CNY, converted at 1 USD = {rate.rate:g} CNY "
                    f"({rate.source}; as of {rate.as_of})")  # fmt: skip
    assert fx_line({"total": 1.0, "currency": "USD", "budget_currency_total": None}) is None


def test_an_infeasible_solve_page_says_why_and_lists_the_changes(run_cli, write_scenario, tmp_path):
    path = write_scenario(budget={"amount": 0.01, "currency": "USD"})
    result = run_cli("solve", path, "--html", tmp_path / "p.html")
    assert result.exit_code == 1
    text = (tmp_path / "p.html").read_text()
    assert Page(text).sections() == ["plan", "explanation"]
    assert "budget.amount" in text and "No plan (infeasible)" in text


def test_bought_cards_get_their_own_rows_with_the_purchase_on_day_0():
    doc = {"utilisation": [{"where": "owned", "gpu": "RTX-4090", "cards": 1},
                           {"where": "bought", "gpu": "RTX-4090", "cards": 2}],
           "purchases": [{"gpu": "RTX-4090", "cards": 2, "price": 32000.0}], "rentals": [], "jobs": [],
           "cost": {"currency": "CNY"}}  # fmt: skip
    rows, bars = card_rows(doc)
    assert rows == ["owned RTX-4090 card 1", "bought RTX-4090 card 1", "bought RTX-4090 card 2"]
    assert [(b.row, b.start, b.cls) for b in bars] == [(1, 0.0, "purchase"), (2, 0.0, "purchase")]
    assert "32,000.00 CNY" in bars[0].text


def _lane_labels(svg: str) -> list[tuple[float, str, str]]:
    """(x, shown text, <title> text or "") of every lane label of a Gantt SVG."""
    out = []
    for x, title, shown in re.findall(r'<text class="lane" x="([\d.]+)"[^>]*>(?:<title>([^<]*)</title>)?([^<]*)</text>',
                                      svg):
        out.append((float(x), html.unescape(shown), html.unescape(title)))
    return out


def test_gantt_row_labels_start_inside_the_chart(portfolio_result):
    """No row label is clipped at the left edge: at the lane font size (text_width's generous estimate) each one
    starts at x >= 0, on the shipped portfolio (44-character rental labels) and on long and CJK names."""
    from optimizer.report.html import portfolio_page
    from optimizer.report.html.html_svg import LANE_FONT_PX, MAX_LANE_LABEL_PX, Bar, gantt, text_width

    text = portfolio_page(portfolio_result, str(REPO / "portfolios" / "team-q1.yaml"))
    labels = _lane_labels(text)
    assert any(s.startswith("rented lambda-gpu_8x_h100_sxm5-us-east-1") for _, s, _ in labels)
    assert all(x - text_width(s, LANE_FONT_PX) >= 0 and not t for x, s, t in labels)
    cjk = "rented 算家云-4090-华东 x8"
    long = "rented " + "very-long-offer-name-" * 6 + " x8"
    svg = gantt(["owned RTX-4090 card 1", cjk, long], [Bar(0, 0.0, 1.0, "job owned", "a")], 10.0, "schedule")
    labels = _lane_labels(svg)
    assert [s for _, s, _ in labels][:2] == ["owned RTX-4090 card 1", cjk]
    x, shown, title = labels[2]
    assert shown.endswith("…") and long.startswith(shown[:-1]) and title == long  # cut, whole text in <title>
    assert text_width(shown, LANE_FONT_PX) <= MAX_LANE_LABEL_PX
    assert all(x - text_width(s, LANE_FONT_PX) >= 0 for x, s, _ in labels)
    width = float(re.search(r'viewBox="0 0 ([\d.]+) ', svg).group(1))
    assert max(x for x, _, _ in labels) + 8 + 730 + 20 == width  # the day axis keeps its 730 px


CJK_FALLBACKS = ('"Noto Sans CJK SC"', '"PingFang SC"', '"Microsoft YaHei"')


def test_every_font_list_names_cjk_fallbacks(solved):
    """A provider named in Chinese (算家云, catalogs/offers/cn.yaml) renders where the first font lacks CJK glyphs:
    every font family list of every page kind (they share one stylesheet) lists CJK fonts before its generic."""
    from optimizer.report.html import batch_page, solve_page

    for text in (solve_page(solved), batch_page([])):
        css = re.search(r"<style>(.*?)</style>", text, re.S).group(1)
        lists = [m.group(2) for m in re.finditer(r"(font|font-family):([^;}]*)", css) if "inherit" not in m.group(2)]
        assert any(v.split(",")[0].split()[-1] == "system-ui" for v in lists), lists  # the body's list
        for value in lists:
            families = [f.strip() for f in value.split(",")]
            where = [families.index(f) if f in families else -1 for f in CJK_FALLBACKS]
            assert -1 not in where and where == sorted(where), value
            assert families[-1] in ("sans-serif", "monospace") and max(where) < len(families) - 1, value


def test_an_alternatives_cost_reads_as_the_cost_line_does():
    # the HTML column gave only the report-currency figure (11,010.86) beside text that writes both currencies
    doc = {"cost": {"total": 1626.76, "currency": "USD", "budget_currency_total": 11010.86, "budget_currency": "CNY"}}
    assert money_cell_text(doc) == "1,626.76 USD (= 11,010.86 CNY)"
    same = {"cost": {"total": 228.8, "currency": "CNY", "budget_currency_total": None}}
    assert money_cell_text(same) == "228.80 CNY"


def test_the_solve_page_says_what_the_text_says_after_the_plan(run_cli, tmp_path):
    """The trade the tolerance made and the fused-loss hint appear on the page as in --json (the text's Trade-off and
    Hint lines); a solve with neither shows neither."""
    from html import escape

    def page_and_json(path, *args):
        out = tmp_path / f"{path.stem}.html"
        doc = json.loads(run_cli("solve", path, "--json", *args).stdout)
        assert run_cli("solve", path, "--html", out, *args).exit_code == 0
        return out.read_text(), doc

    text, doc = page_and_json(REPO / "scenarios" / "32b-lora.yaml")
    assert doc["trade_off"]["text"] and doc["hint"]["text"]
    assert f"<dt>Trade-off</dt><dd>{escape(doc['trade_off']['text'])}</dd>" in text
    assert f"<dt>Hint</dt><dd>{escape(doc['hint']['text'])}</dd>" in text
    text, doc = page_and_json(REPO / "scenarios" / "14b-lora.yaml", "--objective", "cost")
    assert doc["hint"] is None and "<dt>Hint</dt>" not in text
