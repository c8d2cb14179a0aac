"""The pipeline's decisions (skip, summary, tie band, retry after a crash) with a scripted worker process.

The worker is a stand-in that speaks the real protocol and answers with
results a test chooses (PIPELINE_STUB), so the pipeline's own logic runs on a
machine without a GPU: the static stages are real (ptxas), the runner and the
child process are real.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from ptxbench.engine.pipeline import TIE_BAND, judge
from ptxbench.engine.runner import Runner, RunnerConfig

DATA = Path(__file__).resolve().parent / "data" / "gpu"

STUB = textwrap.dedent(r'''
    import json, os, sys
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    mode = os.environ.get("PIPELINE_STUB", "ok")
    arch = os.environ.get("PIPELINE_STUB_ARCH", "sm_90a")

    def emit(obj):
        proto.write(json.dumps(obj) + "\n")

    def size(i, plan, category="ok", speedup=None):
        out = {"index": i, "split": plan["split"], "sizes": plan["sizes"], "category": category,
               "max_error": 1e-8 if category == "ok" else 0.5,
               "trials": [{"seed": s, "category": category} for s in plan["seeds"]]}
        if plan["time"] and category == "ok":
            out["timing"] = {"reps": 30, "time_ms": 2.0, "p10_ms": 1.9, "p90_ms": 2.1, "spread": 0.1,
                             "tflops": 1.0, "baseline": "torch.add", "baseline_ms": 2.0 * speedup,
                             "speedup": speedup}
        return out

    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "exit":
            break
        if msg["op"] == "hello":
            emit({"event": "hello", "ok": True, "device": {"name": "Stub", "arch": arch, "compute_capability": [9, 0],
                  "num_sms": 132, "l2_bytes": 1, "memory_bytes": 1, "driver": "stub", "versions": {"torch": "x"}}})
            continue
        plans = msg["job"]["sizes"]
        if mode == "crash_train" and plans[0]["split"] == "train":
            emit({"event": "phase", "phase": "launch", "size": 0, "deadline_s": 30, "untrusted": True})
            os.kill(os.getpid(), 9)
        speed = {"ok": 1.5, "tie": 1 - 0.5 * %(tie)r, "slow": 0.5, "crash_train": 1.0}[mode]
        emit({"event": "done", "result": {"sizes": [size(i, p, speedup=speed) for i, p in enumerate(plans)]}})
''' % {"tie": TIE_BAND})


@pytest.fixture
def make_runner(tmp_path, monkeypatch):
    path = tmp_path / "stub.py"
    path.write_text(STUB)
    made = []

    def make(mode: str, arch: str = "sm_90a") -> Runner:
        r = Runner(RunnerConfig(command=[sys.executable, str(path)], start_timeout_s=30,
                                env={"PIPELINE_STUB": mode, "PIPELINE_STUB_ARCH": arch}))
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def test_a_correct_fast_kernel_is_ok(make_runner):
    j = judge(DATA / "vadd_ok.ptx", "vector_add_smoke", runner=make_runner("ok"))
    assert j.status == "judged" and j.category == "ok" and j.stage is None
    assert j.correct is True and j.correct_heldout is True
    assert j.speedup == pytest.approx(1.5) and j.time_ms == pytest.approx(2.0) and j.baseline == "torch.add"
    assert [m.split for m in j.measurements] == ["train", "train", "heldout"]
    assert j.device is not None and j.device.name == "Stub"


def test_a_tie_with_the_library_is_not_slower(make_runner):
    assert judge(DATA / "vadd_ok.ptx", "vector_add_smoke", runner=make_runner("tie")).category == "ok"


def test_a_slow_kernel_is_slower_than_baseline(make_runner):
    j = judge(DATA / "vadd_ok.ptx", "vector_add_smoke", runner=make_runner("slow"))
    assert j.category == "slower_than_baseline" and j.stage == "speed" and j.correct is True


def test_another_arch_is_a_skip_not_a_verdict(make_runner):
    j = judge(DATA / "vadd_ok.ptx", "vector_add_smoke", runner=make_runner("ok", arch="sm_100a"))
    assert j.status == "skipped: no sm_90a device"
    assert j.correct is None and j.measurements == []


def test_after_a_crash_in_train_held_out_gets_a_fresh_worker(make_runner):
    runner = make_runner("crash_train")
    j = judge(DATA / "vadd_ok.ptx", "vector_add_smoke", runner=runner)
    assert j.category == "runtime_other" and j.correct is False
    train = [m for m in j.measurements if m.split == "train"]
    heldout = [m for m in j.measurements if m.split == "heldout"]
    assert [m.category for m in train] == ["runtime_other"]        # the rest of train is not run after a crash
    assert [m.category for m in heldout] == ["ok"] and j.correct_heldout is True
    assert runner.starts == 2
    assert j.evidence["worker_fatal"][0]["signal"] == 9


def test_a_static_failure_never_reaches_the_gpu(make_runner, tmp_path):
    bad = tmp_path / "bad.ptx"
    bad.write_text(".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry vector_add() { movv.u32 %r1, 1; }\n")
    runner = make_runner("ok")
    j = judge(bad, "vector_add_smoke", runner=runner)
    assert j.status == "judged" and j.static.stage == "assemble" and j.category != "ok"
    assert runner.starts == 0


def test_a_manifest_that_does_not_fit_the_kernel_is_decided_before_the_gpu(make_runner):
    from ptxbench.engine.candidate import Candidate
    from ptxbench.engine.manifest import parse_manifest

    code = (DATA / "vadd_ok.ptx").read_text()
    manifest = parse_manifest({"launches": [{"entry": "vector_add", "args": ["X", "Y", "Z"]}]})
    j = judge(Candidate("ptx", code, manifest, "test"), "vector_add_smoke", runner=make_runner("ok"))
    assert j.category == "param_mismatch" and j.correct is False
    assert all(m.category == "param_mismatch" for m in j.measurements)


def test_progress_reports_each_stage_once_with_a_begin_and_an_end(make_runner):
    notes = []
    judge(DATA / "vadd_ok.ptx", "vector_add_smoke", runner=make_runner("ok"),
          progress=lambda stage, status, category=None: notes.append((stage, status)))
    assert notes[0] == ("assemble", "begin") and notes[1] == ("inspect", "end")
    gpu = notes[2:]
    assert gpu[0] == ("run", "begin") and gpu[-1][1] == "end"
    for (s1, b), (s2, e) in zip(gpu[::2], gpu[1::2]):
        assert (b, e) == ("begin", "end") and s1 == s2
