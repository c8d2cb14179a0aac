"""The GPU half of the hostile corpus: each kernel is judged by the real worker through
`engine.pipeline.judge` and must land in its category; a hang or a crash costs that candidate only.

Run on the GPU machine with `pytest -m gpu tests/hostile` (about two minutes: eleven of the cases
kill or crash their worker, and each fresh worker pays for its start). Skipped where there is no
GPU. Set PTXBENCH_HOSTILE_REPORT=FILE to get the table of results as Markdown.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from hostile_cases import HERE, Outcome, cases

from ptxbench.engine.categories import OK
from ptxbench.engine.gpu.protocol import TimingConfig
from ptxbench.engine.pipeline import judge
from ptxbench.engine.runner import Runner, WorkerUnavailable
from ptxbench.engine.static import judge_static
from ptxbench.tasks.spec import get_task

pytestmark = pytest.mark.gpu

GPU = cases("gpu")
DEFAULT_SIZES = (("train", {"N": 65536}),)
LAUNCH_TIMEOUT_S = 2.0          # a trial at these sizes takes well under a millisecond
TIMING = TimingConfig(min_reps=30, max_reps=30)


@pytest.fixture(scope="module")
def runner():
    if shutil.which("nvidia-smi") is None and not Path("/dev/nvidia0").exists():
        pytest.skip("no NVIDIA driver here")
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    r = Runner()
    try:
        device = r.start()
    except WorkerUnavailable as exc:
        pytest.skip(f"the GPU worker cannot start here: {exc}")
    if device is None:
        pytest.skip(f"no GPU: {r.no_device_reason}")
    if device.arch != "sm_90a":
        pytest.skip(f"the corpus is sm_90a; the device is {device.arch}")
    yield r
    r.close()


def _judge(case, runner, asm_cache):
    task = get_task(case.task)
    static = judge_static(HERE / case.file, task, manifest_path=HERE / case.manifest if case.manifest else None,
                          cache=asm_cache)
    assert static.category == OK, (static.category, static.evidence)
    if not case.coverage:
        static.coverage, static.coverage_cubin = {}, None
    started = time.perf_counter()
    extra: dict[str, object] = {"budget_s": case.budget_s} if case.budget_s is not None else {}
    if case.executed:
        extra["executed"] = True
    j = judge(static.candidate, task, runner=runner, static=static, sizes=list(case.sizes or DEFAULT_SIZES),
              timing=TIMING, launch_timeout_s=LAUNCH_TIMEOUT_S, **extra)
    failing = j.evidence.get("first_failure") or {}
    return j, Outcome(case, j.category, time.perf_counter() - started, speedup=j.speedup,
                      detail=str(failing.get("message", ""))[:300])


def _marks(case) -> list[pytest.MarkDecorator]:
    marks = [m for m, on in ((pytest.mark.timing, case.timed), (pytest.mark.release, case.release)) if on]
    if case.open:
        marks.append(pytest.mark.xfail(reason=case.open, strict=True))
    return marks


@pytest.mark.parametrize("case", [pytest.param(c, marks=_marks(c), id=c.id) for c in GPU])
def test_gpu_case(case, runner, asm_cache, record):
    starts = runner.starts
    j, outcome = _judge(case, runner, asm_cache)
    record(outcome)
    assert j.status == "judged", (j.status, j.evidence)
    assert case.accepts(j.category, j.speedup), (j.category, j.speedup, outcome.detail, j.evidence.get("worker_fatal"))
    if j.category in ("hang_timeout", "illegal_address", "misaligned_address", "illegal_instruction",
                      "runtime_other"):
        # The fault cost this candidate its worker, and only that: the evidence says what happened.
        assert j.evidence.get("worker_fatal"), j.evidence
    if case.id == "printf_protocol_spoof":
        # The kernel's printf could not pose as the worker: the one size judged is the real verdict.
        assert [m.category for m in j.measurements] == ["wrong_result"]
        assert runner.starts == starts


def test_the_worker_is_still_good_after_the_corpus(runner, asm_cache):
    """After every hang, fault and hack above, a correct kernel is still judged correct."""
    control = next(c for c in GPU if c.id == "control_ok")
    j, _ = _judge(control, runner, asm_cache)
    assert j.category == OK and j.correct is True
