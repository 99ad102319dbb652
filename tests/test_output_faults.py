"""Output faults: special targets refused, OS errors one line with exit status 3, previous file and mode kept;
batch output locked, a killed pool worker recovered, SIGTERM handled like Ctrl-C; SVG plots byte-identical.
"""

from __future__ import annotations

import errno
import fcntl
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from optimizer.inputs import atomic
from optimizer.inputs.atomic import safe_name, write_atomic
from optimizer.inputs.errors import EXIT_OUTPUT, EXIT_TERMINATED, OutputError
from optimizer.solve import batch
from optimizer.solve.batch import read_rows, run_batch

from .conftest import REPO

SCENARIO = REPO / "scenarios/7b-qlora.yaml"


def _one_line(result, code: int = EXIT_OUTPUT, *needles: str) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("ftopt: error: "), result.stderr
    for needle in needles:
        assert needle in line, line
    return line


def test_a_device_target_is_refused_and_stays_a_device(run_cli):
    _one_line(run_cli("pareto", SCENARIO, "--csv", "/dev/null"), EXIT_OUTPUT, "/dev/null", "not a regular file")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    with pytest.raises(OutputError, match="not a regular file"):
        write_atomic("/dev/null", "x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_directory_or_a_file_as_parent_is_one_line(run_cli, tmp_path):
    with pytest.raises(OutputError, match="is a directory; refusing to replace it"):
        write_atomic(tmp_path, "x")
    (tmp_path / "f").write_text("x")
    _one_line(run_cli("solve", SCENARIO, "--launch-dir", tmp_path / "f" / "launch"), EXIT_OUTPUT, "ENOTDIR")


def test_a_launch_dir_holds_one_plan_and_the_users_own_files(run_cli, tmp_path):
    """A DeepSpeed plan's ds_config.json does not outlive it when a QLoRA plan without one is written there."""
    out = tmp_path / "launch"
    assert run_cli("solve", REPO / "scenarios/70b.yaml", "--launch-dir", out).exit_code == 0
    assert (out / "ds_config.json").exists()
    (out / "notes.txt").write_text("mine\n")
    assert run_cli("solve", SCENARIO, "--launch-dir", out).exit_code == 0
    fresh = tmp_path / "fresh"
    assert run_cli("solve", SCENARIO, "--launch-dir", fresh).exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([p.name for p in fresh.iterdir()] + ["notes.txt"])
    assert "ds_config.json" not in {p.name for p in fresh.iterdir()}
    for p in fresh.iterdir():
        assert (out / p.name).read_bytes() == p.read_bytes()


def test_a_launch_dir_that_cannot_take_every_file_keeps_all_its_previous_files(run_cli, tmp_path):
    out = tmp_path / "launch"
    assert run_cli("solve", REPO / "scenarios/70b.yaml", "--launch-dir", out).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "llamafactory.yaml").unlink()
    (out / "llamafactory.yaml").mkdir()  # one target the new plan writes cannot be replaced
    del before["llamafactory.yaml"]
    _one_line(run_cli("solve", SCENARIO, "--launch-dir", out), EXIT_OUTPUT, "llamafactory.yaml", "is a directory")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # ds_config.json kept too
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_full_disk_keeps_the_previous_file_and_its_mode(tmp_path, monkeypatch):
    target = tmp_path / "results.csv"
    target.write_text("previous\n")
    target.chmod(0o600)

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OutputError, match=r"No space left on device \(ENOSPC\); any previous file is unchanged"):
        write_atomic(target, "new\n")
    assert target.read_text() == "previous\n" and [p.name for p in tmp_path.iterdir()] == ["results.csv"]
    monkeypatch.undo()
    write_atomic(target, "new\n")
    assert target.read_text() == "new\n" and stat.S_IMODE(target.stat().st_mode) == 0o600


def test_the_file_size_limit_is_one_line_with_exit_3(tmp_path):
    out = tmp_path / "front.csv"
    out.write_text("previous\n")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "optimizer", "pareto", str(SCENARIO), "--csv", str(out)],
                          capture_output=True, text=True, env=env, preexec_fn=small_files, timeout=120)  # fmt: skip
    assert proc.returncode == EXIT_OUTPUT, proc.stderr
    assert proc.stderr.count("\n") == 1 and "EFBIG" in proc.stderr and "Traceback" not in proc.stderr
    assert out.read_text() == "previous\n"


def test_names_become_safe_file_names():
    assert safe_name("a/b") == "a_b"
    assert safe_name("../../etc") == "_.._etc"
    assert len(safe_name("n" * 300)) == 100
    assert safe_name("") == "unnamed"


def test_a_second_batch_on_the_same_output_is_refused(run_cli, tmp_path):
    out = tmp_path / "rows.jsonl"
    out.write_text("")
    fd = os.open(tmp_path / ".rows.jsonl.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        refused = run_cli("batch", SCENARIO, "-o", out)
        _one_line(refused, EXIT_OUTPUT, "another ftopt batch is writing this file")
        assert refused.stderr.startswith("ftopt: error: ")  # no blank line before it (the bar has not started)
    finally:
        os.close(fd)
    assert run_cli("batch", SCENARIO, "-o", out).exit_code == 0
    assert [r["status"] for r in read_rows(out)] == ["optimal"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl"]  # the lock file is removed at the end


def test_a_lock_file_removed_as_it_is_opened_is_taken_again(tmp_path, monkeypatch):
    """A batch that opened .NAME.lock just before the batch holding it removed it (its last act) must not keep a
    lock on that removed file: a third batch would create a new one and write beside it."""
    out = tmp_path / "rows.jsonl"
    lock = tmp_path / ".rows.jsonl.lock"
    lock.write_text("")
    real_open = os.open
    opened = []

    def open_then_removed(path, *args):
        fd = real_open(path, *args)
        if not opened:
            os.unlink(path)  # the holder's exit, between this open and the flock
        opened.append(path)
        return fd

    monkeypatch.setattr(batch.os, "open", open_then_removed)
    with batch.output_lock(out):
        assert len(opened) == 2 and lock.exists()
        fd = real_open(lock, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):  # the file the path names now is the one held
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    assert not lock.exists()


def test_a_new_results_file_is_not_left_empty_when_nothing_can_be_written(tmp_path, monkeypatch):
    out = tmp_path / "rows.jsonl"

    def broken(path):
        raise OutputError(str(path), "cannot be written: No space left on device (ENOSPC)")

    monkeypatch.setattr(batch, "open_append", broken)
    with pytest.raises(OutputError, match="ENOSPC"):
        run_batch([str(SCENARIO)], out, workers=1)
    assert not out.exists()


_real_solve_row = batch.solve_row


def _killer(path: str, *args):
    """Stand-in for solve_row: kills its own worker (as the OOM killer would) on scenarios named kill-*."""
    name = Path(path).name
    marker = Path(path).with_suffix(".killed")
    if name.startswith("kill-always") or (name.startswith("kill-once") and not marker.exists()):
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return _real_solve_row(path, *args)


def test_a_killed_worker_does_not_turn_pending_scenarios_into_errors(tmp_path, monkeypatch):
    names = ["a.yaml", "b.yaml", "kill-once.yaml", "c.yaml", "d.yaml", "kill-always.yaml"]
    for name in names:
        shutil.copy(SCENARIO, tmp_path / name)
    monkeypatch.setattr(batch, "solve_row", _killer)
    summary = run_batch(sorted(str(tmp_path / n) for n in names), tmp_path / "rows.jsonl", workers=2)
    status = {Path(r["scenario"]).name: (r["status"], r["error"]) for r in summary.rows}
    assert {n: s for n, (s, _) in status.items() if n != "kill-always.yaml"} == dict.fromkeys(
        ["a.yaml", "b.yaml", "c.yaml", "d.yaml", "kill-once.yaml"], "optimal")
    assert status["kill-always.yaml"][0] == "error" and "worker process died" in status["kill-always.yaml"][1]
    assert len(read_rows(tmp_path / "rows.jsonl")) == len(names)


def test_sigterm_ends_a_batch_like_ctrl_c(tmp_path):
    for copy in range(3):
        for f in sorted((REPO / "scenarios").glob("*.yaml")):
            shutil.copy(f, tmp_path / f"{copy}-{f.name}")
    out = tmp_path / "rows.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "optimizer", "batch", str(tmp_path), "-o", str(out), "--workers",
                             "2"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n") >= 1):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    rows = read_rows(out)
    if proc.returncode == EXIT_TERMINATED:
        assert f"solved {len(rows)} in" in " ".join(err.split()), err
    else:  # the batch had already finished
        assert proc.returncode == 0 and len(rows) == 30


def test_svg_plots_are_byte_identical(tmp_path, run_cli):
    pytest.importorskip("matplotlib")
    for name in ("a.svg", "b.svg"):
        assert run_cli("pareto", SCENARIO, "--plot", tmp_path / name).exit_code == 0
    assert (tmp_path / "a.svg").read_bytes() == (tmp_path / "b.svg").read_bytes()


def _refuse(monkeypatch, name: str) -> None:
    """Make staging the temporary of any target called ``name`` fail as a read-only folder would."""
    real = atomic._temporary

    def temporary(target, *args):
        if Path(target).name == name:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return real(target, *args)

    monkeypatch.setattr(atomic, "_temporary", temporary)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.name.startswith("."))


def test_pareto_writes_every_output_or_none(run_cli, tmp_path, monkeypatch):
    """A --html that cannot be written leaves the --csv and --plot of the same run unwritten (and the old CSV)."""
    (tmp_path / "front.csv").write_text("previous\n")
    args = ("pareto", SCENARIO, "--csv", tmp_path / "front.csv", "--plot", tmp_path / "front.svg",
            "--html", tmp_path / "out" / "front.html")  # fmt: skip
    _refuse(monkeypatch, "front.html")
    line = _one_line(run_cli(*args), EXIT_OUTPUT, "front.html", "EACCES", "no output was written")
    assert "front.csv" not in line
    assert (tmp_path / "front.csv").read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["front.csv"]  # no plot, no out/ folder, no temporaries
    monkeypatch.undo()
    assert run_cli(*args).exit_code == 0
    assert (tmp_path / "front.csv").read_text() != "previous\n"
    assert (tmp_path / "front.svg").is_file() and (tmp_path / "out" / "front.html").is_file()


def test_solve_writes_no_launch_files_when_its_html_fails(run_cli, tmp_path, monkeypatch):
    (tmp_path / "taken").write_text("a file where the report's folder should be\n")
    result = run_cli("solve", SCENARIO, "--launch-dir", tmp_path / "launch", "--html", tmp_path / "taken" / "r.html")
    _one_line(result, EXIT_OUTPUT, "r.html")
    assert not (tmp_path / "launch").exists() and result.stdout == ""
    _refuse(monkeypatch, "r.html")
    _one_line(run_cli("solve", SCENARIO, "--launch-dir", tmp_path / "launch" / "a", "--html", tmp_path / "r.html"),
              EXIT_OUTPUT, "r.html", "EACCES")  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # launch/a and launch/ removed again


def test_a_failed_rename_puts_back_every_file_already_replaced(tmp_path, monkeypatch):
    (tmp_path / "one").mkdir()
    for name, text in (("a.txt", "old a\n"), ("stale.json", "old stale\n"), ("b.txt", "old b\n")):
        (tmp_path / "one" / name).write_text(text)
    outputs = [atomic.Output(tmp_path / "one", {"a.txt": "new a\n", "n.txt": "new n\n"}, ("stale.json",)),
               atomic.Output.file(tmp_path / "two.html", "page\n")]  # fmt: skip
    real = os.replace

    def replace(src, dst):
        if Path(dst).name == "two.html":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)
    with pytest.raises(OutputError, match=r"two\.html: cannot be written: .*EIO.*no output was written"):
        atomic.write_outputs_atomic(outputs)
    assert {p.name: p.read_text() for p in (tmp_path / "one").iterdir()} == {
        "a.txt": "old a\n", "stale.json": "old stale\n", "b.txt": "old b\n"}  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one"]
    monkeypatch.undo()
    atomic.write_outputs_atomic(outputs)
    assert {p.name: p.read_text() for p in (tmp_path / "one").iterdir()} == {
        "a.txt": "new a\n", "n.txt": "new n\n", "b.txt": "old b\n"}  # fmt: skip
    assert (tmp_path / "two.html").read_text() == "page\n"


@pytest.mark.parametrize("option", ["--html", "--csv", "--plot"])
def test_a_directory_named_as_an_output_file_is_exit_3(run_cli, tmp_path, option):
    """README "Exit status": a target that is not a regular file is an output that cannot be written (3), not bad
    input (click's dir_okay=False would make it 2)."""
    (tmp_path / "x.svg").mkdir()
    _one_line(run_cli("pareto", SCENARIO, option, tmp_path / "x.svg"), EXIT_OUTPUT, "x.svg", "is a directory")


def test_every_file_output_refuses_a_directory_with_exit_3(run_cli, tmp_path):
    (tmp_path / "r.jsonl").mkdir()
    (tmp_path / "f").write_text("")
    _one_line(run_cli("solve", SCENARIO, "--html", tmp_path), EXIT_OUTPUT, "is a directory")
    _one_line(run_cli("estimate", SCENARIO, "--gpu", "RTX-4090", "--cards", "1", "--micro-batch", "1",
                      "--html", tmp_path), EXIT_OUTPUT, "is a directory")  # fmt: skip
    _one_line(run_cli("batch", SCENARIO, "-o", tmp_path / "r.jsonl"), EXIT_OUTPUT, "r.jsonl", "is a directory")
    _one_line(run_cli("solve", SCENARIO, "--launch-dir", tmp_path / "f"), EXIT_OUTPUT, "f")
    _one_line(run_cli("probe", SCENARIO, "--out", tmp_path / "f"), EXIT_OUTPUT, "f")
    _one_line(run_cli("portfolio", REPO / "portfolios/team-q1.yaml", "--html", tmp_path, "--time-limit", "5"),
              EXIT_OUTPUT, "is a directory")  # fmt: skip


def test_a_batch_whose_html_cannot_be_written_stops_before_solving(run_cli, tmp_path, monkeypatch):
    _refuse(monkeypatch, "b.html")
    out = tmp_path / "rows.jsonl"
    _one_line(run_cli("batch", SCENARIO, "-o", out, "--html", tmp_path / "new" / "b.html"), EXIT_OUTPUT, "b.html")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no rows, no folder, no temporaries
