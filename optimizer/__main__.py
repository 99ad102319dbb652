"""``python -m optimizer`` and the ``ftopt`` console script: a Ctrl-C while the CLI is still importing is one line.

Importing the CLI (OR-Tools, pandas, numpy, pydantic) takes most of a second; an interrupt in that window would
otherwise print a Python traceback. Exit status 130 (128 + SIGINT) as for an interrupt anywhere else.
"""

from __future__ import annotations

import _signal  # the C module: importing signal.py would pull in enum, slowly and interruptibly
import os
import sys


def _exit_now(code: int, message: str = "") -> None:
    """Print ``message`` (if any) to stderr and end the process with ``code`` at once.

    ``os._exit`` rather than ``sys.exit``: when the interrupt landed inside code an extension module ran during
    import, CPython remembers an "unhandled" KeyboardInterrupt even though it was caught and would end the
    process by re-raising SIGINT (status -2 instead of 130). Everything ftopt writes is flushed or atomic by now.
    """
    sys.stdout.flush()
    if message:
        sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(code)


def main() -> None:
    """Import the CLI and run it; an interrupt during the import prints ``ftopt: interrupted`` and exits 130.

    While the CLI imports, Ctrl-C only sets a flag: a KeyboardInterrupt raised inside an extension module's
    initialisation surfaces as an ImportError (pybind11's "initialization failed"), not as an interrupt.
    """
    interrupted: list[int] = []
    previous = _signal.signal(_signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    try:
        from optimizer.cli.commands import main as cli_main
    except KeyboardInterrupt:
        interrupted.append(_signal.SIGINT)
    finally:
        _signal.signal(_signal.SIGINT, previous)
    from optimizer.inputs.errors import EXIT_INTERRUPTED

    if interrupted:
        _exit_now(EXIT_INTERRUPTED, "ftopt: interrupted")
    try:
        cli_main()
    except KeyboardInterrupt:  # one that reached no handler of the command's own
        _exit_now(EXIT_INTERRUPTED, "ftopt: interrupted")
    except SystemExit as done:
        # The command has finished and written what it writes: a Ctrl-C from here on would only turn a finished
        # run into CPython's re-raised SIGINT (status -2) during shutdown, so it is ignored.
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
        if done.code == EXIT_INTERRUPTED:
            _exit_now(EXIT_INTERRUPTED)
        raise


if __name__ == "__main__":
    main()
