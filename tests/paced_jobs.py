"""A Dask judging job paced for the tests of a stop (tests/test_cluster.py): it says it began, then takes its time.

The first sample of a batch is quick, the others slow, so a stop made at the first row finds jobs
running on the workers. Imported by the Dask worker processes (their sys.path is the test's).
"""

from __future__ import annotations

import time
from typing import Any

from ptxbench.services import cluster_worker

QUICK_S = 0.3
SLOW_S = 3.0


def paced_judge(req: Any, static_only: bool) -> Any:
    cluster_worker.say_began(req)
    time.sleep(QUICK_S if req.index == 0 else SLOW_S)
    return cluster_worker.judge_on_worker(req, static_only)
