"""The loop of the checker scripts that run in a library's own environment (lf_check.py, ax_check.py).

Stdlib only (those environments hold no ftopt): ``run(check)`` reads CASES.json (argv[1]), calls ``check(case,
workdir)`` for each case in a fresh working folder and writes RESULTS.json (argv[2]): "ok" or the error text.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path


def run(check: Callable[[dict, Path], str]) -> None:
    """Check every case of argv[1] and write the results to argv[2]."""
    cases = json.loads(Path(sys.argv[1]).read_text())
    results = {}
    for name, case in sorted(cases.items()):
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            try:
                results[name] = check(case, Path(tmp))
            except BaseException:  # noqa: BLE001  (every failure, SystemExit from a parser included, is a result)
                results[name] = traceback.format_exc(limit=3)
    Path(sys.argv[2]).write_text(json.dumps(results, indent=1))
