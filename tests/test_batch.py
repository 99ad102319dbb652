"""Batch solving: inputs, isolated failures, streamed and resumable results, identical rows for any worker count."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import types
from pathlib import Path

import pytest

from bench.gen_scenarios import write_scenarios
from optimizer.inputs.errors import InputError
from optimizer.inputs.fingerprint import inputs_digest
from optimizer.solve import batch
from optimizer.solve.batch import REQUIRED_FIELDS, ROW_FIELDS, expand, read_rows, run_batch, solve_row
from optimizer.solve.planner import solve_scenario

from .conftest import REPO, seventy_b

SCENARIOS = REPO / "scenarios"


@pytest.fixture
def folder(tmp_path: Path, write_scenario) -> Path:
    """Four good scenarios (two shipped, two variants of the base one) and two broken files."""
    shutil.copy(SCENARIOS / "7b-qlora.yaml", tmp_path / "a-7b-qlora.yaml")
    shutil.copy(seventy_b(), tmp_path / "b-70b.yaml")
    write_scenario("c-base.yaml")
    write_scenario("d-tight.yaml", budget={"amount": 0.05, "currency": "USD"})
    write_scenario("e-unknown-model.yaml", model="Llama-9-1T")
    (tmp_path / "f-not-yaml.yaml").write_text("model: [unclosed\n")
    return tmp_path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------------------------------------ inputs


def test_expand_takes_files_folders_and_globs_once_each(folder: Path):
    paths = expand([str(folder / "a-7b-qlora.yaml"), str(folder), str(folder / "b-*.yaml")])
    assert len(paths) == 6
    assert paths[0].endswith("a-7b-qlora.yaml")


def test_expand_rejects_an_input_that_names_no_scenario(tmp_path: Path):
    with pytest.raises(InputError, match=r"^.*nothing\.yaml: no scenario file"):
        expand([str(tmp_path / "nothing.yaml")])


def test_a_folders_unreadable_yaml_entries_get_error_rows_not_silence(tmp_path: Path, write_scenario):
    """A named pipe, a dangling link and a looping link named *.yaml had no row and no warning; a folder so named
    is searched, not a scenario."""
    write_scenario("a-good.yaml")
    os.mkfifo(tmp_path / "fifo.yaml")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop.yaml").symlink_to("loop.yaml")
    (tmp_path / "sub.yaml").mkdir()
    paths = expand([str(tmp_path)])
    assert [Path(p).name for p in paths] == ["a-good.yaml", "dangling.yaml", "fifo.yaml", "loop.yaml"]
    assert expand([str(tmp_path / "*.yaml")]) == paths
    out = tmp_path / "results.jsonl"
    run_batch(paths, out, workers=1)
    rows = {Path(r["scenario"]).name: r for r in _lines(out)}
    assert rows["a-good.yaml"]["status"] == "optimal"
    errors = {name: rows[name]["error"] for name in ("dangling.yaml", "fifo.yaml", "loop.yaml")}
    assert all(rows[n]["status"] == "error" for n in errors) and "named pipe" in errors["fifo.yaml"], errors


# ------------------------------------------------------------------------------------------------ rows


def test_row_has_every_field_and_matches_solve():
    row = solve_row(str(seventy_b()))
    best = solve_scenario(seventy_b()).best
    assert tuple(row) == ROW_FIELDS
    assert (row["status"], row["gpu"], row["cards"], row["tp"], row["zero_stage"], row["micro_batch"]) == (
        best.status.value,
        best.plan.gpu,
        best.plan.cards,
        best.plan.tp,
        best.plan.zero_stage,
        best.plan.micro_batch,
    )
    assert row["error"] is None
    u = best.uncertainty
    assert (row["hours_p90"], row["fits_p90"]) == (u.time.hours_p90, u.memory.fits_p90)
    assert row["hours_p90"] > row["hours"] and row["cost_p90"] >= row["cost"]
    assert row["cost_p90"] == round(u.cost.total_p90, 2)  # 70b.yaml: offers and budget both in CNY


def test_infeasible_row_carries_the_explanation(folder: Path):
    row = solve_row(str(folder / "d-tight.yaml"))
    assert row["status"] == "infeasible" and row["gpu"] is None
    assert row["error"].startswith("budget too small")


def test_user_error_becomes_an_error_row_with_its_one_line_message(folder: Path):
    row = solve_row(str(folder / "e-unknown-model.yaml"))
    assert row["status"] == "error" and "Llama-9-1T" in row["error"] and "\n" not in row["error"]


def test_unexpected_exception_becomes_an_error_row(folder: Path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("simulated bug\nwith a second line")

    monkeypatch.setattr(batch, "load_space", boom)
    row = solve_row(str(folder / "c-base.yaml"))
    assert row["status"] == "error"
    assert row["error"] == "unexpected RuntimeError: simulated bug with a second line"


# ------------------------------------------------------------------------------------------------ the batch


def test_batch_reports_broken_files_and_solves_all_the_others(folder: Path):
    out = folder / "out" / "results.jsonl"
    summary = run_batch(expand([str(folder)]), out, workers=2)
    rows = _lines(out)
    assert [Path(r["scenario"]).name for r in rows] == sorted(p.name for p in folder.glob("*.yaml"))
    assert summary.counts == {"optimal": 3, "feasible": 0, "infeasible": 1, "error": 2}
    assert {Path(r["scenario"]).name for r in summary.errors} == {"e-unknown-model.yaml", "f-not-yaml.yaml"}


def test_rows_are_identical_for_one_and_two_workers(tmp_path: Path):
    paths = [str(p) for p in write_scenarios(12, tmp_path / "s", seed=3)]
    run_batch(paths, tmp_path / "w1.jsonl", workers=1)
    run_batch(paths, tmp_path / "w2.jsonl", workers=2)
    assert (tmp_path / "w1.jsonl").read_bytes() == (tmp_path / "w2.jsonl").read_bytes()


def test_rerun_skips_scenarios_already_in_the_output(folder: Path):
    out = folder / "results.jsonl"
    paths = expand([str(folder / "a-7b-qlora.yaml"), str(folder / "c-base.yaml")])
    run_batch(paths[:1], out, workers=1)
    summary = run_batch(paths, out, workers=1)
    assert (summary.skipped, summary.solved) == (1, 1)
    assert len(_lines(out)) == 2


def test_rerun_retries_error_rows_and_keeps_one_row_per_scenario(folder: Path, write_scenario):
    out = folder / "results.jsonl"
    paths = expand([str(folder / "e-unknown-model.yaml")])
    run_batch(paths, out, workers=1)
    write_scenario("e-unknown-model.yaml")  # the user fixes the file
    summary = run_batch(paths, out, workers=1)
    assert summary.solved == 1
    assert [r["status"] for r in _lines(out)] == ["optimal"]


def test_partial_last_line_is_dropped_and_its_scenario_solved_again(folder: Path):
    out = folder / "results.jsonl"
    paths = expand([str(folder / "a-7b-qlora.yaml"), str(folder / "c-base.yaml")])
    run_batch(paths, out, workers=1)
    text = out.read_text()
    out.write_text(text[: text.index("\n") + 1] + text[text.index("\n") + 1 :][:40])  # second row cut mid-write
    summary = run_batch(paths, out, workers=1)
    assert (summary.skipped, summary.solved) == (1, 1)
    assert len(_lines(out)) == 2


def test_interrupted_batch_keeps_finished_rows_and_resumes_without_redoing_them(tmp_path: Path):
    paths = [str(p) for p in write_scenarios(6, tmp_path / "s", seed=1)]
    out = tmp_path / "results.jsonl"
    seen: list[str] = []

    def interrupt_after_two(row):
        seen.append(row["scenario"])
        if len(seen) == 2:
            raise KeyboardInterrupt

    first = run_batch(paths, out, workers=2, on_row=interrupt_after_two)
    assert first.interrupted and first.solved == 2
    assert sorted(r["scenario"] for r in _lines(out)) == sorted(seen)
    second = run_batch(paths, out, workers=2)
    assert (second.skipped, second.solved) == (2, 4)
    assert [r["scenario"] for r in _lines(out)] == sorted(paths)


def test_ctrl_c_while_a_row_is_written_leaves_the_row_counted_and_in_the_file(tmp_path: Path, monkeypatch):
    """A real SIGINT arriving as the third row is formatted: the row is written and counted, then the batch stops.

    Before, the row was counted as solved before it was written, so the summary said one more than the file held.
    """
    import os
    import signal

    paths = [str(p) for p in write_scenarios(5, tmp_path / "s", seed=3)]
    out = tmp_path / "results.jsonl"
    formatted: list[str] = []
    real_format = batch.format_row

    def format_then_interrupt(row, fmt):
        formatted.append(row["scenario"])
        if len(formatted) == 3:
            os.kill(os.getpid(), signal.SIGINT)  # Python raises it at the next instruction it runs
        return real_format(row, fmt)

    monkeypatch.setattr(batch, "format_row", format_then_interrupt)
    # Ctrl-C as a terminal delivers it: Python's own handler, which a shell's background job starts without
    # (SIGINT ignored), so this run would not see the interrupt at all there
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        summary = run_batch(paths, out, workers=1)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert summary.interrupted
    assert summary.solved == len(_lines(out)) == 3


def test_csv_output_has_the_header_and_resumes(folder: Path):
    out = folder / "results.csv"
    paths = expand([str(folder / "a-7b-qlora.yaml"), str(folder / "e-unknown-model.yaml")])
    run_batch(paths[:1], out, workers=1)
    summary = run_batch(paths, out, workers=1)
    lines = out.read_text().splitlines()
    assert lines[0] == ",".join(ROW_FIELDS)
    assert summary.skipped == 1 and len(lines) == 3
    assert [r["status"] for r in read_rows(out)] == ["optimal", "error"]


def test_csv_booleans_are_spelt_as_in_the_jsonl(folder: Path):
    """fits_p90 is true/false in both formats (docs/json-contract.md), also for rows kept from an older CSV that
    wrote Python's True/False."""
    paths = [str(folder / "a-7b-qlora.yaml")]
    run_batch(paths, folder / "results.jsonl", workers=1)
    fits = _lines(folder / "results.jsonl")[0]["fits_p90"]
    assert isinstance(fits, bool)
    out = folder / "results.csv"
    run_batch(paths, out, workers=1)
    col = ROW_FIELDS.index("fits_p90")
    assert out.read_text().splitlines()[1].split(",")[col] == json.dumps(fits)
    out.write_text(out.read_text().replace(f",{json.dumps(fits)},", f",{fits},"))  # as an older ftopt wrote it
    assert run_batch(paths, out, workers=1).skipped == 1
    assert out.read_text().splitlines()[1].split(",")[col] == json.dumps(fits)


def test_batch_summary_counts_in_words_and_mentions_reuse_only_with_an_output(run_cli, folder: Path):
    res = run_cli("batch", folder / "a-7b-qlora.yaml")
    said = " ".join(res.stderr.split() + res.stdout.split())
    assert "Done: 1 scenario (1 optimal)" in said and "already in the output" not in said, said
    out = folder / "results.jsonl"
    res = run_cli("batch", folder / "a-7b-qlora.yaml", folder / "c-base.yaml", "-o", out)
    assert "Done: 2 scenarios (" in " ".join(res.stderr.split()) and "skipped 0 already in the output" in " ".join(
        res.stderr.split())


# ------------------------------------------------------------------------------------------------ resume


def test_an_edited_scenario_is_solved_again_and_its_stale_row_replaced(tmp_path: Path, write_scenario):
    scenario = write_scenario("a.yaml", catalog="lambda")
    out = tmp_path / "results.jsonl"
    first = run_batch([str(scenario)], out, workers=1)
    assert first.counts["optimal"] == 1
    write_scenario("a.yaml", catalog="lambda", budget={"amount": 0.01, "currency": "USD"})  # the user edits it
    second = run_batch([str(scenario)], out, workers=1)
    assert (second.skipped, second.changed, second.solved) == (0, 1, 1)
    assert [r["status"] for r in _lines(out)] == ["infeasible"]  # the row of the file as it is now, and only it
    third = run_batch([str(scenario)], out, workers=1)  # unchanged since: reused
    assert (third.skipped, third.changed, third.solved) == (1, 0, 0)


def test_the_same_file_from_another_working_directory_keeps_one_row(tmp_path: Path, write_scenario, monkeypatch):
    (tmp_path / "R").mkdir()
    write_scenario("R/a.yaml", catalog="lambda")
    monkeypatch.chdir(tmp_path)
    run_batch(expand(["R"]), "R.jsonl", workers=1)
    monkeypatch.chdir(tmp_path / "R")
    again = run_batch(expand(["a.yaml"]), "../R.jsonl", workers=1)
    assert (again.skipped, again.solved) == (1, 0)
    rows = _lines(tmp_path / "R.jsonl")
    assert [(r["scenario"], r["scenario_resolved"]) for r in rows] == [("R/a.yaml", "R/a.yaml")]


def test_a_changed_catalog_file_the_scenario_names_changes_its_fingerprint(tmp_path: Path, write_scenario):
    offers = tmp_path / "my-offers.yaml"
    shutil.copy(REPO / "catalogs" / "offers" / "lambda.yaml", offers)
    scenario = write_scenario("a.yaml", catalog="my-offers.yaml")  # relative to the scenario's folder
    before = inputs_digest(str(scenario))
    (tmp_path / "unrelated.yaml").write_text("x: 1\n")
    assert inputs_digest(str(scenario)) == before
    offers.write_text(offers.read_text().replace("lambda", "lambda ", 1))  # one byte more in a file it is solved with
    assert inputs_digest(str(scenario)) != before
    assert inputs_digest(str(scenario), calibration=str(offers)) != inputs_digest(str(scenario))  # --calibration


def test_rows_of_an_older_results_file_are_read_and_solved_again(folder: Path):
    """A file written before rows carried a fingerprint: its rows parse, and cannot be reused (nothing proves that
    the scenario is unchanged), so each is solved again and replaced by one row."""
    out = folder / "results.jsonl"
    paths = [str(folder / "a-7b-qlora.yaml")]
    run_batch(paths, out, workers=1)
    old = [{k: v for k, v in r.items() if k not in ("scenario_resolved", "inputs_sha256")} for r in _lines(out)]
    out.write_text("".join(json.dumps(r) + "\n" for r in old))
    assert [r["status"] for r in read_rows(out)] == ["optimal"]
    summary = run_batch(paths, out, workers=1)
    assert (summary.skipped, summary.changed, summary.solved) == (0, 1, 1)
    assert len(_lines(out)) == 1 and _lines(out)[0]["inputs_sha256"] == inputs_digest(paths[0])


def test_an_older_csv_results_file_is_read_and_rewritten_with_the_new_columns(folder: Path):
    out = folder / "results.csv"
    paths = [str(folder / "a-7b-qlora.yaml")]
    run_batch(paths, out, workers=1)
    n = len(REQUIRED_FIELDS)
    out.write_text("".join(",".join(line.split(",")[:n]) + "\n" for line in out.read_text().splitlines()))
    assert [r["status"] for r in read_rows(out)] == ["optimal"]
    summary = run_batch(paths, out, workers=1)
    assert summary.changed == 1
    assert out.read_text().splitlines()[0] == ",".join(ROW_FIELDS) and len(read_rows(out)) == 1


def test_batch_cli_says_how_many_changed_scenarios_it_solved_again(run_cli, tmp_path: Path, write_scenario):
    scenario = write_scenario("a.yaml", catalog="lambda")
    out = tmp_path / "results.jsonl"
    assert run_cli("batch", scenario, "-o", out).exit_code == 0
    write_scenario("a.yaml", catalog="lambda", seq_len=4096)
    res = run_cli("batch", scenario, "-o", out)
    assert "skipped 0 already in the output, re-solved 1 changed" in " ".join(res.stderr.split())


def test_unknown_output_format_is_a_user_error(folder: Path):
    with pytest.raises(InputError, match=r"use a \.jsonl or \.csv file"):
        run_batch([str(folder / "c-base.yaml")], folder / "results.txt")


def test_ray_backend_without_ray_is_a_one_line_error(folder: Path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(InputError, match=r"^--backend: ray: Ray is not installed"):
        run_batch([str(folder / "c-base.yaml"), str(folder / "a-7b-qlora.yaml")], backend=batch.Backend.ray)


# ------------------------------------------------------------------------------------------------ CLI


def test_batch_cli_streams_rows_and_prints_a_summary_with_errors(run_cli, folder: Path):
    out = folder / "results.jsonl"
    res = run_cli("batch", folder, "-o", out, "--workers", "2")
    assert res.exit_code == 0, res.output
    assert len(_lines(out)) == 6
    assert "6 scenarios (3 optimal, 1 infeasible, 2 error)" in " ".join(res.stderr.split())
    assert "e-unknown-model.yaml" in res.stderr


def test_an_error_line_names_the_scenario_path_once(run_cli, write_scenario, tmp_path: Path):
    # "error X/broken.yaml: X/broken.yaml: catalog: ..." once; an error in another file keeps that file's path
    broken = write_scenario("broken.yaml", catalog="nosuchcatalog")
    offers = tmp_path / "offers-bad.yaml"
    offers.write_text("schema_version: 1\ncurrency: USD\noffers: [{id: x}]\n")
    other = write_scenario("other.yaml", catalog=str(offers))
    out = tmp_path / "results.jsonl"
    res = run_cli("batch", broken, other, "-o", out, "--html", tmp_path / "batch.html")
    lines = [line for line in res.stderr.splitlines() if line.startswith("error ")]
    assert len(lines) == 2, res.stderr
    mine = next(line for line in lines if "broken.yaml" in line)
    assert mine.count(str(broken)) == 1
    assert mine.startswith(f"error {broken}: catalog: catalog file 'nosuchcatalog' not found")
    theirs = next(line for line in lines if "other.yaml" in line)
    assert theirs.startswith(f"error {other}: {offers}: offers[0]")
    page = (tmp_path / "batch.html").read_text()
    assert "catalog: catalog file &#x27;nosuchcatalog&#x27;" in page and f"{broken}: catalog:" not in page
    rows = {Path(r["scenario"]).name: r for r in _lines(out)}  # the results file keeps the whole message
    assert rows["broken.yaml"]["error"].startswith(f"{broken}: catalog: ")


def test_batch_cli_without_output_prints_a_table(run_cli, folder: Path):
    res = run_cli("batch", folder / "a-7b-qlora.yaml")
    assert res.exit_code == 0, res.output
    assert "Batch results" in res.stdout and "optimal" in res.stdout


def test_ctrl_c_after_the_last_row_still_prints_the_summary(run_cli, folder: Path, monkeypatch):
    """A Ctrl-C that lands once every row is in (as the bar closes) ends the batch as a complete one."""
    from optimizer.report import batch as report_batch

    real = report_batch.batch_progress

    @contextlib.contextmanager
    def late_interrupt(console):
        with real(console) as hooks:
            yield hooks
            raise KeyboardInterrupt  # run_batch has returned: this is the window a real Ctrl-C can hit

    monkeypatch.setattr(report_batch, "batch_progress", late_interrupt)
    out = folder / "results.jsonl"
    res = run_cli("batch", folder / "a-7b-qlora.yaml", "-o", out)
    assert res.exit_code == 0, res.output
    assert len(_lines(out)) == 1
    assert "Done: 1 scenario (1 optimal); solved 1 in" in " ".join(res.stderr.split())


def test_ctrl_c_before_the_batch_starts_is_one_line_and_130(run_cli, folder: Path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(batch, "run_batch", interrupted)
    res = run_cli("batch", folder / "a-7b-qlora.yaml", "-o", folder / "results.jsonl")
    assert res.exit_code == 130
    assert res.stderr.strip().endswith("ftopt: interrupted") and "Traceback" not in res.stderr


def test_batch_cli_rejects_a_missing_input_in_one_line(run_cli, tmp_path: Path):
    res = run_cli("batch", tmp_path / "missing.yaml", "-o", tmp_path / "r.jsonl")
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "no scenario file" in res.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_batch_help_ends_with_examples(run_cli):
    res = run_cli("batch", "--help")
    assert "Examples:" in res.stdout and "ftopt batch scenarios/ -o results.jsonl" in res.stdout


def test_unreachable_ray_cluster_is_a_one_line_error(folder: Path, monkeypatch):
    def refuse(**kwargs):
        raise ConnectionError("could not connect to 10.0.0.1:6379")

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=refuse)
    monkeypatch.setitem(sys.modules, "ray", fake)
    paths = [str(folder / "c-base.yaml"), str(folder / "a-7b-qlora.yaml")]
    with pytest.raises(InputError, match=r"^--address: cannot reach the Ray cluster at '10\.0\.0\.1:6379': could not"):
        run_batch(paths, backend=batch.Backend.ray, address="10.0.0.1:6379")
