"""Output files: written atomically (a temporary file in the target's folder, then a rename), never a device.

Rules every writer follows (README.md "Exit status"):

- an existing target that is not a regular file (``/dev/null``, a device, a pipe, a directory) is refused before
  anything is written: renaming over it would replace the device node with a regular file;
- any OS error (read-only folder, full disk ENOSPC, file-size limit EFBIG, a parent that is a file) is an
  :class:`OutputError`: one line naming the file, exit status EXIT_OUTPUT; the temporary file is removed and the
  previous file is left exactly as it was;
- a replaced file keeps its permission bits (a 0600 file stays 0600); a new one gets the mode a plain
  ``open(path, "w")`` would give it (0666 less the umask). Data is fsynced before the rename, so a full disk is
  reported rather than leaving a truncated file behind;
- a command with several outputs (``solve --launch-dir --html``, ``pareto --csv --plot --html``) writes them with
  one :func:`write_outputs_atomic` call: all of them or none, the error naming the output that failed.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from optimizer.inputs.errors import OutputError


def _umask() -> int:
    """The process's file-creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _why(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{exc.strerror or exc}" + (f" ({name})" if name else "")


def check_target(path: str | Path) -> int | None:
    """The permission bits of the existing regular file ``path``, None when there is none; OutputError otherwise."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise OutputError(str(path), f"cannot be written: {_why(exc)}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, pipe or socket)"
        raise OutputError(str(path), f"is {kind}; refusing to replace it, give a file path")
    return stat.S_IMODE(info.st_mode)


def safe_name(text: str, limit: int = 100) -> str:
    """A file name made from data (a scenario name, a case id): letters, digits, ``_.-`` only, at most ``limit``.

    A ``/`` would name a folder, 256 bytes is the usual file-name limit and a leading dot hides the file.
    """
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:limit].lstrip(".")
    return name or "unnamed"


def _temporary(target: Path, data: str | bytes, mode: int | None, temps: list[str]) -> str:
    """Write ``data`` to a new temporary beside ``target`` (mode kept, fsynced); its name is appended to ``temps``."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:200]}.", suffix=".tmp")
    temps.append(tmp)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), mode if mode is not None else 0o666 & ~_umask())
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)
        fh.flush()
        os.fsync(fh.fileno())
    return tmp


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8, newlines untranslated) or leave it untouched.

    See the module docstring for the rules; raises OutputError on any failure.
    """
    write_outputs_atomic([Output.file(path, data)])


def write_folder_atomic(folder: str | Path, files: dict[str, str | bytes], owned: Iterable[str] = (),
                        error_path: str | None = None) -> None:  # fmt: skip
    """Write ``files`` (name -> data) into ``folder`` all or none, and remove the ``owned`` names not among them.

    Every file is first written to a temporary beside its target (fsynced); only when all of them are written are
    they renamed into place, so a failure (full disk, a target that is a directory) leaves the folder as it was.
    ``owned`` are the names this writer may have left there before (another plan's ``ds_config.json``): those the
    new set does not write are removed, so the folder never mixes two plans. Other files in the folder are kept.
    ``error_path`` is the path an error names (default: the folder).
    """
    write_outputs_atomic([Output(Path(folder), files, tuple(owned), error_path)])


@dataclass(frozen=True)
class Output:
    """One output of a command: ``files`` (name -> data) written into ``folder``.

    The ``owned`` names not among ``files`` are removed (see :func:`write_folder_atomic`); an error names
    ``error_path`` (default: the folder).
    """

    folder: Path
    files: dict[str, str | bytes]
    owned: tuple[str, ...] = ()
    error_path: str | None = None

    @classmethod
    def file(cls, path: str | Path, data: str | bytes) -> Output:
        """The single file ``path``."""
        return cls(Path(path).parent, {Path(path).name: data}, error_path=str(path))

    @property
    def label(self) -> str:
        """The path an error about this output names."""
        return self.error_path or str(self.folder)


def _make_folder(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; the ones created, deepest first (to remove them again)."""
    missing: list[Path] = []
    probe = folder
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def _set_aside(target: Path) -> str | None:
    """A hard link to the existing ``target`` beside it (to put it back), None where the file system has none."""
    name = str(target.parent / f".{target.name[:200]}.{secrets.token_hex(6)}.old")
    try:
        os.link(target, name, follow_symlinks=False)
    except OSError:
        return None
    return name


def write_outputs_atomic(outputs: Sequence[Output]) -> None:
    """Write every one of ``outputs`` or none of them (the files of a command with several outputs).

    Every target is checked first (no device, no directory); then every file's bytes are written to a temporary
    beside its target (fsynced), and only when all of them are written are they renamed into place, the outputs in
    the order given. A failure while staging removes the temporaries and any folder created for them, so nothing
    changes; a failure while renaming (rare: the folder changed meanwhile) puts back the files already replaced
    (each was hard-linked aside first) and removes the new ones. Either way the error is one OutputError naming the
    output that failed (exit status 3), and no other output is written.
    """
    plans = []
    for out in outputs:
        base, files, owned = out.folder, out.files, out.owned
        targets = {name: base / name for name in files}
        modes = {name: check_target(target) for name, target in targets.items()}
        stale = [base / name for name in owned if name not in files]
        for target in stale:
            check_target(target)
        plans.append((out, targets, modes, stale))
    temps: list[str] = []
    created: list[Path] = []
    done: list[tuple[Path, str | None, bool]] = []  # (target, its previous file set aside, whether it existed)
    current = outputs[0] if outputs else None
    try:
        staged = []
        for out, targets, modes, _ in plans:
            current = out
            created += _make_folder(out.folder)
            staged.append({name: _temporary(targets[name], data, modes[name], temps)
                           for name, data in out.files.items()})  # fmt: skip
        for (out, targets, _, stale), written in zip(plans, staged, strict=True):
            current = out
            for name, tmp in written.items():
                check_target(targets[name])  # still not a device (a path swapped in meanwhile)
                existed = os.path.lexists(targets[name])
                backup = _set_aside(targets[name]) if existed else None
                if backup:
                    temps.append(backup)
                os.replace(tmp, targets[name])
                temps.remove(tmp)
                done.append((targets[name], backup, existed))
            for target in stale:
                if os.path.lexists(target):
                    aside = str(target.parent / f".{target.name[:200]}.{secrets.token_hex(6)}.old")
                    os.replace(target, aside)
                    temps.append(aside)
                    done.append((target, aside, True))
    except (OSError, OutputError) as exc:
        _roll_back(done, temps, created)
        if isinstance(exc, OutputError):
            raise
        assert current is not None
        if len(outputs) > 1:
            what = "no output was written and previous files are unchanged"
        elif current.error_path:
            what = "any previous file is unchanged"
        else:
            what = "the folder's previous files are unchanged"
        raise OutputError(current.label, f"cannot be written: {_why(exc)}; {what}") from None
    finally:
        for tmp in temps:
            Path(tmp).unlink(missing_ok=True)


def _roll_back(done: list[tuple[Path, str | None, bool]], temps: list[str], created: list[Path]) -> None:
    """Undo the renames in ``done`` (latest first), remove the ``temps`` left and the folders ``created``.

    Best effort: an error here would hide the one being reported.
    """
    for target, aside, existed in reversed(done):
        try:
            if aside is not None:
                os.replace(aside, target)
            elif not existed:
                target.unlink(missing_ok=True)
        except OSError:
            pass
    for tmp in temps:
        Path(tmp).unlink(missing_ok=True)
    temps.clear()
    for folder in sorted(created, key=lambda p: len(p.parts), reverse=True):
        try:
            folder.rmdir()
        except OSError:
            pass


def check_writable(path: str | Path) -> None:
    """OutputError now when the file ``path`` could not be written later (for an output written after a long run).

    The target must be a regular file or absent (:func:`check_target`), and its folder must take a new file: an
    empty temporary is created there and removed again, with any folder made for it.
    """
    target = Path(path)
    check_target(target)
    temps: list[str] = []
    created: list[Path] = []
    try:
        created = _make_folder(target.parent)
        _temporary(target, b"", None, temps)
    except OSError as exc:
        raise OutputError(str(path), f"cannot be written: {_why(exc)}") from None
    finally:
        _roll_back([], temps, created)


def open_append(path: str | Path) -> IO[str]:
    """``path`` opened for appending UTF-8 text (created if missing); OutputError for a non-regular file."""
    check_target(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OutputError(str(path), "is not a regular file; refusing to write to it, give a file path")
        return os.fdopen(fd, "a", encoding="utf-8", newline="")
    except OSError as exc:
        raise OutputError(str(path), f"cannot be written: {_why(exc)}") from None
