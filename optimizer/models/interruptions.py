"""Expected wall clock of a job on interruptible (spot) capacity, with checkpoints at the Young/Daly interval.

Symbols (seconds; arrays of shape (n,)): W training work (steps x step time), C one checkpoint save, R restart
after an interruption (start-up plus reading the last checkpoint back), S the first start-up, M the job's mean
time between interruptions (a node's MTBI / nodes: any node lost stops the job).

    tau = sqrt(2 C M)                                          # Young 1974, first-order optimum interval
    busy = W (1 + C / tau) + S                                  # work, periodic saves, first start-up
    T = busy / (1 - (R + (tau + C) / 2) / M)                    # interruptions arrive at rate 1/M of wall clock;
                                                                # each loses half an interval of work and a restart
    lost = T - busy                                             # restarts and recomputed work

Sources: J. W. Young, "A first order approximation to the optimum checkpoint interval", CACM 17(9), 1974;
J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps", FGCS 22(3), 2006
(section 3: tau ~ sqrt(2 C M) when C << M, and the expected-time form above with exponential interruptions).
Assumptions: interruptions are a Poisson process; the expected time is finite only while R + (tau + C)/2 < M,
otherwise the job is not expected to finish (infinite time).
"""

from __future__ import annotations

import numpy as np


def young_daly_interval_s(save_s: np.ndarray, mtbi_s: np.ndarray) -> np.ndarray:
    """Optimal seconds of work between checkpoints, (n,): sqrt(2 C M) (Young 1974; Daly 2006 eq. for C << M)."""
    return np.sqrt(2.0 * np.asarray(save_s, dtype=np.float64) * np.asarray(mtbi_s, dtype=np.float64))


def job_mtbi_s(node_mtbi_h: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """The job's mean seconds between interruptions, (n,): node MTBI x 3600 / nodes (independent nodes)."""
    return np.asarray(node_mtbi_h, dtype=np.float64) * 3600.0 / np.maximum(nodes, 1).astype(np.float64)


def expected_seconds(work_s: np.ndarray, save_s: np.ndarray, restart_s: np.ndarray, startup_s: np.ndarray,
                     mtbi_s: np.ndarray) -> dict[str, np.ndarray]:  # fmt: skip
    """Expected wall clock on spot capacity, (n,) each: ``total``, ``interval`` (tau), ``lost`` (see module).

    ``total`` is infinite where an interruption is expected before a restart and half an interval complete.
    """
    tau = young_daly_interval_s(save_s, mtbi_s)
    busy = work_s * (1.0 + save_s / tau) + startup_s
    share = (restart_s + (tau + save_s) / 2.0) / mtbi_s  # fraction of wall clock lost to interruptions
    with np.errstate(divide="ignore", invalid="ignore"):
        total = np.where(share < 1.0, busy / (1.0 - share), np.inf)
    return {"total": total, "interval": tau, "lost": total - busy}
