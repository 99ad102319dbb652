"""Many scenarios at once: a process pool on this machine or tasks on a Ray cluster, results streamed to a file.

Contract (README.md "Batches"; row keys in docs/json-contract.md):

* Inputs are files, folders (every ``*.yaml``/``*.yml`` entry below them that is not a folder) and globs;
  duplicates are solved once.
* One row per scenario (:data:`ROW_FIELDS`): the plan's key decision values, cost in the report currency, hours,
  the same at the 90th percentile of the models' held-out errors (``cost_p90``, ``hours_p90``, ``fits_p90``),
  status (optimal, feasible, infeasible or error) and ``error``, the one-line message of a failure or the
  infeasibility explanation. A failing scenario never stops the others: every exception in a worker becomes a row.
* Rows are appended to the output (``.jsonl`` or ``.csv``) and flushed as each scenario finishes, in completion
  order; when the batch ends, normally or by Ctrl-C, the file is rewritten atomically in scenario-path order with
  one row per scenario. Row content depends only on the scenario and catalog, so the final file is identical for
  any worker count and either backend.
* Resume: rerunning with the same output reuses a scenario's row only when it is the same file and it is
  unchanged. The same file: rows are matched by ``scenario_resolved``, the scenario's path with symlinks and ``..``
  resolved, relative to the output's folder (so the working directory the batch runs from does not matter).
  Unchanged: the row's ``inputs_sha256`` equals the fingerprint of the scenario and the files it is solved with now
  (optimizer/inputs/fingerprint.py). A changed scenario is solved again and its old row replaced (counted as
  ``changed``); error rows are retried (the file may have been fixed). A row without a fingerprint (from a results
  file written before rows carried one) cannot be shown to match its file: it counts as changed and is solved
  again, once; keeping a possibly stale row silently would be the worse error. A partly written last line (a
  killed process) and any row that does not parse are dropped before the run.

Workers solve with :func:`solve_row`, which hands CP-SAT only the candidates that can be optimal
(dominance.relevant: the non-dominated ones among those the allow-lists admit, an exact reduction) and falls back
to the full space to explain an infeasible scenario. Each process caches the catalogs it loads
(catalog.load_catalog), and the local pool forks from a parent that has imported everything, so a worker starts
in milliseconds.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import glob
import io
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from optimizer.inputs.atomic import check_target, open_append, write_atomic
from optimizer.inputs.errors import FtoptError, InputError, OutputError
from optimizer.inputs.fingerprint import FileDigests, inputs_digest
from optimizer.inputs.inputfile import read_bytes
from optimizer.solve.dominance import relevant
from optimizer.solve.explain import explain
from optimizer.solve.planner import Overrides, cut_short, load_space, named_limits, remaining, to_estimate
from optimizer.solve.solver import SolverSettings, solve

DEFAULT_SETTINGS = SolverSettings()  # CP-SAT defaults: 10 s limit, 1 worker, seed 0
ROW_FIELDS = ("scenario", "name", "status", "gpu", "cards", "nodes", "tp", "dp", "zero_stage", "offload",
              "micro_batch", "grad_accum", "checkpointing", "cost", "currency", "hours", "cost_p90", "hours_p90",
              "fits_p90", "error", "scenario_resolved", "inputs_sha256")  # fmt: skip
BOOL_FIELDS = ("fits_p90",)  # true/false in the JSONL and the CSV alike
# the fields every results file has held; the last two came later and are null in rows read from older files
REQUIRED_FIELDS = ROW_FIELDS[: ROW_FIELDS.index("error") + 1]
STATUSES = ("optimal", "feasible", "infeasible", "error")
SCENARIO_SUFFIXES = (".yaml", ".yml")

Row = dict[str, Any]  # ROW_FIELDS -> value (None where not applicable)
_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
MAX_RESULTS_BYTES = 1024 * 1024 * 1024  # a results file to resume: about 3 million rows
MAX_STRIKES = 2  # pool breaks a scenario may be caught in before it is solved alone


class Backend(StrEnum):
    """Where the scenarios are solved."""

    local = "local"  # a process pool on this machine
    ray = "ray"  # tasks on a Ray cluster (optional dependency)


# ------------------------------------------------------------------------------------------------ inputs


def expand(inputs: Iterable[str]) -> list[str]:
    """Scenario files named by ``inputs`` (files, folders searched recursively, globs), first occurrence kept.

    Rule: every ``*.yaml``/``*.yml`` entry of a folder, and every glob match, that is not a folder is a scenario,
    so one that cannot be read (a named pipe, a dangling or looping link) gets its error row, not silence.
    """
    out: list[str] = []
    seen: set[str] = set()
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found = sorted(str(p) for p in path.rglob("*") if p.suffix in SCENARIO_SUFFIXES and not p.is_dir())
        elif path.is_file():
            found = [item]
        elif glob.has_magic(item):
            found = sorted(p for p in glob.glob(item, recursive=True) if not Path(p).is_dir())
        else:
            found = []
        if not found:
            raise InputError(item, "", "no scenario file: not a file, a folder with *.yaml files or a matching glob")
        for p in found:
            key = os.path.realpath(p)
            if key not in seen:
                seen.add(key)
                out.append(p)
    return out


# ------------------------------------------------------------------------------------------------ one scenario


def solve_row(path: str, settings: SolverSettings = DEFAULT_SETTINGS, calibration: str | None = None) -> Row:
    """Solve one scenario file into a row; never raises (failures become ``status: error`` rows).

    ``calibration``: a calibration overlay file replacing the scenario's (optimizer/models/overlay.py).
    ``scenario_resolved`` and ``inputs_sha256`` are left None: the batch fills them (:func:`run_batch`).
    """
    row: Row = dict.fromkeys(ROW_FIELDS)
    row["scenario"] = path
    row["name"] = Path(path).stem
    try:
        deadline = time.monotonic() + settings.time_limit_s  # the limit bounds the build and the solve together
        loaded = load_space(path, Overrides(calibration=calibration), deadline)
        sc, catalog, source, space, limits = loaded.scenario, loaded.catalog, loaded.source, loaded.space, loaded.limits
        row["name"] = sc.name
        with named_limits(source):
            out = solve(space, sc.objective, limits, remaining(settings, deadline), subset=relevant(space, limits),
                        tolerance=sc.tolerance)  # fmt: skip
            rel = explain(space, sc.objective, limits, settings, catalog, source) if out.index is None else None
        row["currency"] = space.currency
        if rel is not None:
            row["status"] = "infeasible"
            row["error"] = rel.message
            return row
        assert out.index is not None
        est = to_estimate(space, out.index, cut_short(space, out.status))
        p = est.plan
        assert p is not None and est.time is not None
        row.update(status=est.status.value, gpu=p.gpu, cards=p.cards, nodes=p.nodes, tp=p.tp, dp=p.dp,
                   zero_stage=p.zero_stage, offload=p.offload.value, micro_batch=p.micro_batch,
                   grad_accum=p.grad_accum, checkpointing=p.checkpointing.value,
                   cost=round(float(space.cost_total[out.index]), 2), hours=est.time.hours)  # fmt: skip
        u = est.uncertainty
        if u is not None:  # the plan at the 90th percentile of the models' held-out errors (models/uncertainty.py)
            fx = space.fx[int(space.cand.offer_idx[out.index])]
            row.update(cost_p90=round(u.cost.total_p90 * fx, 2), hours_p90=u.time.hours_p90, fits_p90=u.memory.fits_p90)
    except FtoptError as exc:
        _fail(row, str(exc))
    except Exception as exc:  # any bug stays with its scenario; the batch carries on
        _fail(row, f"unexpected {type(exc).__name__}: {exc}")
    return row


def row_error(row: Row) -> str:
    """A row's error as shown beside its scenario: without the scenario path the row already names.

    An error in the scenario file itself starts with that path (InputError: "FILE: field: ..."); an error in
    another file (a catalog, a config.json) keeps its own path.
    """
    error = str(row.get("error") or "")
    prefix = f"{row.get('scenario')}: "
    return error[len(prefix) :] if error.startswith(prefix) else error


def _fail(row: Row, message: str) -> None:
    for key in REQUIRED_FIELDS[2:]:
        row[key] = None
    row["status"] = "error"
    row["error"] = " ".join(message.split())


# ------------------------------------------------------------------------------------------------ result files


def output_format(path: str | Path) -> str:
    """``jsonl`` or ``csv`` from the output's suffix."""
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".csv"):
        return suffix[1:]
    raise InputError(str(path), "-o", f"unknown output format '{suffix or path}'; use a .jsonl or .csv file")


def _valid(row: Any) -> bool:
    return isinstance(row, dict) and all(k in row for k in REQUIRED_FIELDS) and row["status"] in STATUSES


def read_rows(path: str | Path) -> list[Row]:
    """The complete, well-formed rows of a results file; a partial last line and malformed rows are dropped."""
    target = Path(path)
    if check_target(target) is None:  # refuses a device or a directory named as the output
        return []
    text = read_bytes(target, str(target), MAX_RESULTS_BYTES, "a results file").decode("utf-8", errors="replace")
    complete = text[: text.rfind("\n") + 1]  # a line without its newline was cut off mid-write
    rows: list[Row] = []
    if output_format(target) == "jsonl":
        for line in complete.splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if _valid(row):
                rows.append({k: row.get(k) for k in ROW_FIELDS})
        return rows
    reader = csv.DictReader(io.StringIO(complete))
    for row in reader:
        if None not in row and _valid(row) and None not in row.values():
            rows.append({k: row.get(k) or None if k in ROW_FIELDS[len(REQUIRED_FIELDS):] else row[k]
                         for k in ROW_FIELDS})  # fmt: skip
    return rows


def _csv_value(key: str, value: Any) -> Any:
    """A row value as a CSV cell: empty for null, ``true``/``false`` for a boolean as in the JSONL.

    A boolean read back from a CSV (a string, ``True``/``False`` in files written before) is written in that
    spelling too.
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if key in BOOL_FIELDS and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower()
    return value


def format_row(row: Row, fmt: str) -> str:
    """One row as a line of JSONL or CSV (with its newline); CSV writes booleans ``true``/``false`` as JSON does."""
    if fmt == "jsonl":
        return json.dumps({k: row[k] for k in ROW_FIELDS}, ensure_ascii=False) + "\n"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([_csv_value(k, row[k]) for k in ROW_FIELDS])
    return buf.getvalue()


def render_rows(rows: list[Row], fmt: str) -> str:
    """A whole results file: the CSV header (for CSV) and one line per row."""
    head = ",".join(ROW_FIELDS) + "\n" if fmt == "csv" else ""
    return head + "".join(format_row(r, fmt) for r in rows)


def output_anchor(output: str | Path | None) -> str:
    """The folder rows' ``scenario_resolved`` paths are relative to: the output's (resolved), else the working one."""
    return os.path.realpath(os.path.dirname(os.path.abspath(output)) if output is not None else os.curdir)


def resolved_key(path: str, anchor: str) -> str:
    """Scenario ``path`` with symlinks and ``..`` resolved, relative to ``anchor`` (a row's ``scenario_resolved``).

    The same file gives the same key from any working directory; moving the output together with its scenarios
    keeps the keys.
    """
    return os.path.relpath(os.path.realpath(path), anchor)


def row_key(row: Row, anchor: str) -> str:
    """The file a row was solved from: its ``scenario_resolved``.

    A row of an older file has none: its ``scenario`` is resolved from the working directory (all an older ftopt
    could do).
    """
    return str(row.get("scenario_resolved") or resolved_key(str(row["scenario"]), anchor))


def final_rows(rows: Iterable[Row], anchor: str | None = None) -> list[Row]:
    """One row per scenario file (the last one written wins), in scenario-path order (then by resolved path).

    ``anchor``: see :func:`output_anchor`; default the working directory.
    """
    base = anchor if anchor is not None else output_anchor(None)
    latest: dict[str, Row] = {}
    for row in rows:
        latest[row_key(row, base)] = row
    return sorted(latest.values(), key=lambda r: (str(r["scenario"]), row_key(r, base)))


class Resume(StrEnum):
    """What a rerun does with one input scenario, given the output's row for the same file (if any)."""

    new = "new"  # no row: solve
    retry = "retry"  # an error row: solve again (the file may have been fixed)
    changed = "changed"  # a row solved from other inputs, or one without a fingerprint: solve again, replace it
    reuse = "reuse"  # a row solved from exactly these inputs: keep it, skip the scenario


def resume_action(row: Row | None, digest: str | None) -> Resume:
    """How to treat a scenario whose inputs have fingerprint ``digest`` (None: unreadable) and whose row is ``row``.

    Rule: a row is reused only when its status is not error and its ``inputs_sha256`` equals ``digest``.
    """
    if row is None:
        return Resume.new
    if row["status"] == "error":
        return Resume.retry
    if digest is None or row.get("inputs_sha256") != digest:
        return Resume.changed
    return Resume.reuse


# ------------------------------------------------------------------------------------------------ backends


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS reports one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _quiet_worker() -> None:
    """Pool initializer: Ctrl-C is the parent's to handle (it stops the pool and keeps finished rows).

    The worker was forked with SIGINT blocked (:func:`_sigint_blocked`), so an interrupt that reached the whole
    process group before this line is discarded rather than raised mid-start-up.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's handler is not the worker's: terminate() ends it
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


@contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Hold SIGINT back in this thread (and in the processes it forks) until the block ends, then deliver it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ignore Ctrl-C and SIGTERM while a short clean-up runs (stopping workers, rewriting the results file)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def interrupt_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block ends, then act on them as the handlers in place before would.

    Masking the signal (:func:`_sigint_blocked`) is not enough here: the kernel hands a process-wide signal to any
    thread that does not mask it (the pool's, the solver's), and Python then runs the handler in the main thread
    at once. Swapping the Python-level handlers for a recorder holds it whichever thread received it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if caught:
        handler = previous[caught[0]]
        if callable(handler):
            handler(caught[0], None)
        elif handler == signal.SIG_DFL and caught[0] == signal.SIGINT:
            raise KeyboardInterrupt
        elif handler == signal.SIG_DFL:
            signal.raise_signal(caught[0])


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that a batch stops exactly as on Ctrl-C (rows kept, summary)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Terminated` (a KeyboardInterrupt) in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def output_lock(output: str | Path | None) -> Iterator[None]:
    """Hold an exclusive lock on ``output`` (``.NAME.lock`` beside it) for the whole batch; OutputError if taken.

    Two batches appending to one file would each rewrite it from their own rows at the end, losing the other's. The
    lock file is removed when the batch ends (while still locked), so none is left behind. A batch that opened the
    file just before it was removed would lock a file no longer in the folder: after locking, the lock is kept only
    when the path still names the locked file, else it is taken again on the new one, so two batches never hold
    the lock at once.
    """
    if output is None:
        yield
        return
    target = Path(output)
    lock = target.parent / f".{target.name[:200]}.lock"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(str(output), f"cannot create its lock file {lock.name}: {exc.strerror or exc}") from None
    fd = _take_lock(output, lock)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)  # still locked: a batch waiting on this file retries on a fresh one
        os.close(fd)  # releases the lock


def _take_lock(output: str | Path, lock: Path) -> int:
    """An open descriptor of ``lock`` holding its exclusive lock, the path still naming it; OutputError if taken."""
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        except OSError as exc:
            raise OutputError(str(output), f"cannot create its lock file {lock.name}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputError(str(output), "another ftopt batch is writing this file; wait for it to finish or "
                              "give another -o") from None  # fmt: skip
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(lock))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # removed by the batch that held it as this one opened it: take the lock on the new file


def _stop(pool: ProcessPoolExecutor, finished: bool) -> None:
    """Shut the pool down: wait for it after a normal end, else cancel the queue and end the running workers."""
    if finished:
        pool.shutdown(wait=True)
        return
    workers = list((getattr(pool, "_processes", None) or {}).values())  # no public API before Python 3.14
    pool.shutdown(wait=False, cancel_futures=True)  # forgets its processes: taken above
    for proc in workers:
        proc.terminate()
    for proc in workers:
        proc.join()


def _local_rows(paths: list[str], workers: int, settings: SolverSettings,
                calibration: str | None = None) -> Iterator[Row]:  # fmt: skip
    """Rows in completion order from a process pool (in this process when ``workers`` is 1).

    On Ctrl-C (or when the consumer stops early) the queued scenarios are cancelled and the running workers are
    ended at once, so the batch exits promptly; the rows already yielded are the caller's to keep.
    """
    if workers <= 1 or len(paths) <= 1:
        for p in paths:
            yield solve_row(p, settings, calibration)
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    strikes: dict[str, int] = {}
    queue, alone = list(paths), []
    while queue:  # a pool that breaks (a worker killed, e.g. for memory) is replaced and its scenarios resubmitted
        broken = yield from _pool_rows(ctx, queue, workers, settings, calibration)
        queue = []
        for path in broken:
            strikes[path] = strikes.get(path, 0) + 1
            (alone if strikes[path] >= MAX_STRIKES else queue).append(path)
    for path in sorted(alone):  # caught in repeated breaks: solve alone, so a death is this scenario's own
        # a scenario still queued when a pool broke was struck without having run: it gets MAX_STRIKES runs alone,
        # and only a scenario whose worker dies in every one of them is reported
        for _ in range(MAX_STRIKES):
            if not (yield from _pool_rows(ctx, [path], 1, settings, calibration)):
                break
        else:
            row = dict.fromkeys(ROW_FIELDS)
            row.update(scenario=path, name=Path(path).stem)
            _fail(row, "worker process died while solving this scenario (killed, e.g. by the out-of-memory killer)")
            yield row


def _pool_rows(ctx: Any, paths: list[str], workers: int, settings: SolverSettings,
               calibration: str | None) -> Generator[Row, None, list[str]]:  # fmt: skip
    """Rows of ``paths`` from one process pool; returns the paths left unsolved because the pool broke."""
    finished = False
    broken: list[str] = []
    pool = ProcessPoolExecutor(max_workers=min(workers, len(paths)), mp_context=ctx, initializer=_quiet_worker)
    try:
        with _sigint_blocked():  # the workers start here: none may see SIGINT before it ignores it
            pending: dict[Future[Row], str] = {pool.submit(solve_row, p, settings, calibration): p for p in paths}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: pending[f]):
                path = pending.pop(fut)
                exc = fut.exception()
                if exc is None:
                    yield fut.result()
                elif isinstance(exc, BrokenProcessPool):
                    broken.append(path)
                else:  # solve_row turns every exception into a row: this is the pool's own failure
                    row = dict.fromkeys(ROW_FIELDS)
                    row.update(scenario=path, name=Path(path).stem)
                    _fail(row, f"worker failed: {type(exc).__name__}: {exc}")
                    yield row
        finished = not broken
    finally:
        with sigint_ignored():
            _stop(pool, finished)
    return broken


def _solve_in(cwd: str, path: str, settings: SolverSettings, calibration: str | None = None) -> Row:
    """Ray task body: solve from the driver's working directory so relative paths mean the same thing."""
    if os.path.isdir(cwd):
        os.chdir(cwd)
    return solve_row(path, settings, calibration)


def _ray_rows(paths: list[str], workers: int, address: str | None, settings: SolverSettings,
              calibration: str | None = None) -> Iterator[Row]:  # fmt: skip
    """Rows in completion order from Ray tasks (one CPU each); starts a local Ray when none is running."""
    if not paths:
        return
    try:
        import ray
    except ImportError:
        raise InputError(
            "--backend", "ray", "Ray is not installed; install it with: pip install 'ftopt[ray]'"
        ) from None
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                     log_to_driver=False, logging_level="ERROR")  # fmt: skip
        except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError... for a bad address
            where = f"cannot reach the Ray cluster at '{address}'" if address else "cannot start a local Ray"
            raise InputError("--address" if address else "--backend", "", f"{where}: {exc}") from None
    task = ray.remote(num_cpus=1)(_solve_in)
    refs = [task.remote(os.getcwd(), p, settings, calibration) for p in paths]
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield ray.get(ref)
    finally:
        for ref in pending:
            ray.cancel(ref)
        if started:
            ray.shutdown()


# ------------------------------------------------------------------------------------------------ the batch


@dataclass
class BatchSummary:
    """What a batch did: counts by status, the errors, the final rows of the inputs, elapsed wall clock."""

    total: int  # scenarios named by the inputs
    skipped: int  # already solved in the output from the same inputs (resume)
    solved: int  # solved in this run
    rows: list[Row]  # one per input scenario that has a row, in scenario-path order
    elapsed_s: float
    interrupted: bool = False
    counts: dict[str, int] = field(default_factory=dict)  # status -> rows (of ``rows``)
    terminated: bool = False  # the interruption was SIGTERM
    changed: int = 0  # had a row solved from other inputs (or without a fingerprint): solved again, row replaced

    @property
    def errors(self) -> list[Row]:
        """Rows whose status is error."""
        return [r for r in self.rows if r["status"] == "error"]


def run_batch(
    paths: list[str],
    output: str | Path | None = None,
    workers: int | None = None,
    backend: Backend = Backend.local,
    address: str | None = None,
    settings: SolverSettings = DEFAULT_SETTINGS,
    on_start: Callable[[int, int], None] | None = None,
    on_row: Callable[[Row], None] | None = None,
    calibration: str | None = None,
) -> BatchSummary:
    """Solve ``paths``, streaming rows to ``output``, reusing those it holds for the same inputs (module docstring).

    Args:
        paths: scenario files (see :func:`expand`).
        output: ``.jsonl`` or ``.csv`` results file, appended to and finally rewritten in order; None keeps rows
            in memory only.
        workers: processes (local) or CPUs of a local Ray; default: the cores available to this process.
        backend: local process pool or Ray.
        address: Ray cluster address (``auto`` or ``host:port``); None starts a local Ray.
        settings: CP-SAT parameters for every scenario.
        on_start: called once with (scenarios to solve, scenarios skipped).
        on_row: called with each row as it finishes (in completion order).
        calibration: a calibration overlay file applied to every scenario (replacing their ``calibration:``).

    Returns:
        The summary; on Ctrl-C (``interrupted``) the pending scenarios are cancelled and the output holds every
        finished row, whole and in order.
    """
    with output_lock(output), sigterm_as_interrupt():
        existed = output is not None and os.path.exists(output)
        try:
            return _run_batch(paths, output, workers, backend, address, settings, on_start, on_row, calibration)
        except OutputError:
            if output is not None and not existed and os.path.isfile(output) and not read_rows(output):
                os.unlink(output)  # a batch that could not write a row leaves no empty results file behind
            raise


def _run_batch(paths: list[str], output: str | Path | None, workers: int | None, backend: Backend,
               address: str | None, settings: SolverSettings, on_start: Callable[[int, int], None] | None,
               on_row: Callable[[Row], None] | None, calibration: str | None) -> BatchSummary:  # fmt: skip
    t0 = time.perf_counter()
    n_workers = workers or available_cores()
    fmt = output_format(output) if output is not None else "jsonl"
    anchor = output_anchor(output)
    previous = read_rows(output) if output is not None else []
    cache: FileDigests = {}  # the built-in catalogs are read once for the whole batch
    stamps = {p: (resolved_key(p, anchor), inputs_digest(p, calibration, cache)) for p in paths}
    latest = {row_key(r, anchor): r for r in previous}  # the last row written for each file wins
    action = {p: resume_action(latest.get(key), digest) for p, (key, digest) in stamps.items()}
    todo = [p for p in paths if action[p] is not Resume.reuse]
    redo = {stamps[p][0] for p in todo}
    kept = [r for r in previous if row_key(r, anchor) not in redo]  # no stale or error row of a scenario to solve
    if output is not None and (previous or os.path.exists(output) or fmt == "csv"):
        write_atomic(Path(output), render_rows(final_rows(kept, anchor), fmt))  # repaired: whole lines, no stale rows
    if on_start is not None:
        on_start(len(todo), len(paths) - len(todo))
    fresh: list[Row] = []
    interrupted = terminated = False
    try:
        _stream(todo, output, fmt, n_workers, backend, address, settings, fresh, on_row, calibration, stamps)
    except KeyboardInterrupt as exc:
        interrupted, terminated = True, isinstance(exc, Terminated)
    with sigint_ignored():  # every row is in: a late Ctrl-C must not lose the summary of them
        wanted = {key for key, _ in stamps.values()}
        mine = [r for r in final_rows(kept + fresh, anchor) if row_key(r, anchor) in wanted]
        counts = {s: sum(1 for r in mine if r["status"] == s) for s in STATUSES}
        changed = sum(1 for a in action.values() if a is Resume.changed)
        return BatchSummary(len(paths), len(paths) - len(todo), len(fresh), mine, time.perf_counter() - t0,
                            interrupted, counts, terminated, changed)  # fmt: skip


def _stream(todo: list[str], output: str | Path | None, fmt: str, workers: int, backend: Backend,
            address: str | None, settings: SolverSettings, fresh: list[Row],
            on_row: Callable[[Row], None] | None, calibration: str | None = None,
            stamps: dict[str, tuple[str, str | None]] | None = None) -> None:  # fmt: skip
    """Solve ``todo``, appending each row to ``fresh`` and to the output (flushed); finally rewrite it in order.

    ``stamps``: scenario path -> (``scenario_resolved``, ``inputs_sha256``), set on each row as it arrives.
    """
    anchor = output_anchor(output)
    stream = open_append(output) if output is not None else None
    rows = (_ray_rows(todo, workers, address, settings, calibration) if backend is Backend.ray
            else _local_rows(todo, workers, settings, calibration))  # fmt: skip
    try:
        for row in rows:
            if stamps is not None and row["scenario"] in stamps:
                row["scenario_resolved"], row["inputs_sha256"] = stamps[row["scenario"]]
            with interrupt_deferred():  # a Ctrl-C here waits until the row is both in the file and counted as solved
                if stream is not None:
                    try:
                        stream.write(format_row(row, fmt))
                        stream.flush()
                    except OSError as exc:  # a full disk, the file-size limit: the rows so far stay in the file
                        raise OutputError(str(output), f"cannot be written: {exc.strerror or exc}; the rows "
                                          "written before are kept, rerun to resume") from None  # fmt: skip
                fresh.append(row)
            if on_row is not None:
                on_row(row)
    finally:
        with sigint_ignored():  # a second Ctrl-C must not cut the clean-up short
            rows.close()  # stops the pool or cancels the Ray tasks still pending
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass  # reported by the write that failed, or by the rewrite below
                write_atomic(Path(output), render_rows(final_rows(read_rows(output), anchor), fmt))  # type: ignore[arg-type]
