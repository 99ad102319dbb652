"""The one exception family ftopt raises for anything a user can fix.

Every message is a single line of the form ``FILE: FIELD: what is wrong, what is allowed``.
The CLI alone catches :class:`FtoptError`, prints the message to stderr and exits with status 2 (3 for an
:class:`OutputError`: a file that could not be written; 1 for a :class:`NoPlanError`: no plan to work on).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # control characters a message quotes from a file

EXIT_NO_PLAN = 1  # answered, and the answer is "no plan" / "does not fit"
EXIT_BAD_INPUT = 2  # an FtoptError: one line on stderr
EXIT_OUTPUT = 3  # an OutputError: an output file could not be written (one line on stderr, previous file kept)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + 15); batch keeps every finished row, as for Ctrl-C


class FtoptError(Exception):
    """A user-facing error whose ``str`` is the complete one-line message."""

    def __init__(self, message: str) -> None:
        text = " ".join(str(message).split())  # one line
        super().__init__(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))  # no raw escape sequences


class InputError(FtoptError):
    """A scenario, catalog or option that does not validate."""

    def __init__(self, source: str, field: str, problem: str) -> None:
        self.source = source
        self.field = field
        self.problem = problem
        prefix = f"{source}: {field}: " if field else f"{source}: "
        super().__init__(prefix + problem)


class OutputError(FtoptError):
    """An output file that cannot be written: not a regular file, read-only folder, full disk, size limit."""

    exit_code = EXIT_OUTPUT

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"{path}: {problem}")


class NoPlanError(FtoptError):
    """A command that needs a plan was given an infeasible scenario.

    One line on stderr and exit status 1 (no plan), as an infeasible ``ftopt solve`` exits; not 2: the input is valid.
    """

    exit_code = EXIT_NO_PLAN

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"{path}: {problem}")


class SolverLimitError(FtoptError):
    """The candidate space or the solver hit a configured limit."""


def did_you_mean(value: str, choices: Iterable[str]) -> str:
    """Return ``", did you mean 'x'?"`` for the closest choice, or an empty string."""
    pool = list(choices)
    close = difflib.get_close_matches(str(value), pool, n=1, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in pool}
        close = [lowered[m] for m in difflib.get_close_matches(str(value).lower(), lowered, n=1, cutoff=0.6)]
    return f", did you mean '{close[0]}'?" if close else ""
