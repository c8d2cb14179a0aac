"""Metrics against values worked out by hand on small stores built here."""

from __future__ import annotations

import math
from fractions import Fraction
from math import comb

import pytest

from ptxbench.db.metrics import GROUP_KEYS, compute_metrics, geometric_mean, pass_at_k
from ptxbench.db.records import Evaluation, Measurement, Run, Sample, Task
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_evaluation, add_sample, create_run, get_or_create_model, upsert_task

KS = (1, 2, 3)


def _task(db, task_id, arch):
    upsert_task(db, Task(id=task_id, title=task_id, operation="op", arch=arch, families=["wgmma"], spec={}, source="test"))


def _judge(db, sample_id, category, *, measurements=(), **kw):
    status = kw.pop("status", "judged")
    add_evaluation(
        db,
        Evaluation(sample_id=sample_id, engine_version="test", status=status, category=category, source="test", **kw),
        measurements,
    )


def _add(db, run, task, *, turn=1, parent=None, index=0):
    return add_sample(
        db,
        Sample(task_id=task, language="ptx", source="test", code=f"// {task} {index} {turn}", run_id=run.id,
               turn=turn, parent_id=parent, sample_index=index),
    ).id


OK = dict(compiled=True, correct=True, uses_ptx=True, uses_sass=True)


@pytest.fixture
def single_turn(tmp_path):
    db = open_store(tmp_path / "m.sqlite")
    _task(db, "gemm", "sm_90a")
    _task(db, "attn", "sm_100a")
    m1 = get_or_create_model(db, "m1")
    m2 = get_or_create_model(db, "m2")
    r1 = create_run(db, Run(model_id=m1.id, name="r1", context_level="brief"))
    r2 = create_run(db, Run(model_id=m2.id, name="r2", context_level="brief"))

    s1 = _add(db, r1, "gemm", index=0)
    # An older judgement that the latest one replaces.
    _judge(db, s1, "wrong_result", compiled=True, correct=False)
    _judge(db, s1, "ok", **OK, correct_heldout=True, speedup=1.2, measurements=[
        Measurement(split="train", sizes={"M": 1}, category="ok", speedup=1.2),
        Measurement(split="heldout", sizes={"M": 2}, category="ok", speedup=0.5),
        Measurement(split="heldout", sizes={"M": 3}, category="ok", speedup=2.0),
    ])
    s2 = _add(db, r1, "gemm", index=1)
    _judge(db, s2, "slower_than_baseline", **OK, correct_heldout=False, speedup=0.8)
    s3 = _add(db, r1, "gemm", index=2)
    _judge(db, s3, "required_missing_sass", compiled=True, correct=True, uses_ptx=True, uses_sass=False, speedup=2.0)
    s4 = _add(db, r1, "gemm", index=3)
    _judge(db, s4, "syntax", compiled=False)
    _add(db, r1, "gemm", index=4)  # never judged: left out

    s5 = _add(db, r2, "attn", index=0)
    _judge(db, s5, "skipped: no sm_100a device", status="skipped: no sm_100a device",
           compiled=True, uses_ptx=True, uses_sass=True)
    s6 = _add(db, r2, "attn", index=1)
    _judge(db, s6, "wrong_result", compiled=True, correct=False, uses_ptx=True, uses_sass=True)

    expert = get_or_create_model(db, "expert", kind="expert")
    e = add_sample(db, Sample(task_id="gemm", language="ptx", source="expert", code="// expert", model_id=expert.id)).id
    _judge(db, e, "ok", **OK, speedup=1.05)
    yield db
    db.close()


def _by(rows, **keys):
    found = [r for r in rows if all(getattr(r, k) == v for k, v in keys.items())]
    assert len(found) == 1, found
    return found[0]


def test_single_turn_train_by_model(single_turn):
    rows = compute_metrics(single_turn, group_by=("model",), ks=KS)
    assert [r.model for r in rows] == ["m1", "m2"]  # the expert is not model output
    m1 = _by(rows, model="m1")
    assert (m1.task, m1.arch, m1.context, m1.split, m1.turn_budget) == (None, None, None, "train", None)
    assert (m1.trajectories, m1.samples, m1.judged, m1.timed) == (4, 4, 4, 3)
    assert m1.compile_rate == 0.75
    assert m1.correct_rate == 0.75           # the syntax error is "not reached" → not correct
    assert m1.uses_ptx_rate == 0.75
    assert m1.uses_sass_rate == 0.5
    assert m1.uses_rate == 0.5
    assert m1.executed_rate is None          # never measured
    assert m1.correct_and_uses_rate == 0.5
    assert m1.fast == {0.0: 0.5, 1.0: 0.25, 1.5: 0.0}
    assert m1.geomean_speedup == pytest.approx((1.2 * 0.8 * 2.0) ** (1 / 3))
    assert m1.best_speedup == 2.0
    assert m1.pass_at == {1: 0.5, 2: pytest.approx(1 - 1 / 6), 3: 1.0}

    m2 = _by(rows, model="m2")
    # The sm_100a sample that was not run is neither a pass nor a failure.
    assert (m2.trajectories, m2.judged) == (2, 1)
    assert m2.compile_rate == 1.0 and m2.uses_rate == 1.0
    assert m2.correct_rate == 0.0 and m2.correct_and_uses_rate == 0.0
    assert m2.fast == {0.0: 0.0, 1.0: 0.0, 1.5: 0.0}
    assert m2.geomean_speedup is None and m2.best_speedup is None
    assert m2.pass_at == {1: 0.0, 2: None, 3: None}


def test_heldout_split(single_turn):
    rows = compute_metrics(single_turn, group_by=("model", "split"), ks=KS)
    assert [(r.model, r.split) for r in rows] == [("m1", "train"), ("m1", "heldout"), ("m2", "train"), ("m2", "heldout")]
    h = _by(rows, model="m1", split="heldout")
    # s1 yes, s2 no, s3 unknown (held-out not judged, no earlier failure), s4 not reached.
    assert h.correct_rate == pytest.approx(1 / 3)
    assert h.judged == 3
    assert h.correct_and_uses_rate == 0.25   # s3 fails on uses, so it is known
    # s1's held-out speedup is the geometric mean of its held-out sizes: √(0.5·2) = 1.
    assert h.geomean_speedup == pytest.approx(1.0) and h.best_speedup == pytest.approx(1.0)
    assert h.fast == {0.0: 0.25, 1.0: 0.0, 1.5: 0.0}


def test_group_by_task_arch_context_and_filters(single_turn):
    rows = compute_metrics(single_turn, group_by=("task", "arch", "context"), ks=KS)
    assert [(r.task, r.arch, r.context) for r in rows] == [("attn", "sm_100a", "brief"), ("gemm", "sm_90a", "brief")]
    assert compute_metrics(single_turn, group_by=(), archs=["sm_90a"])[0].trajectories == 4
    assert compute_metrics(single_turn, group_by=(), tasks=["attn"])[0].trajectories == 2
    assert compute_metrics(single_turn, group_by=(), contexts=["full"]) == []
    assert compute_metrics(single_turn, group_by=(), models=["nobody'; DROP TABLE samples; --"]) == []
    pooled = compute_metrics(single_turn, group_by=(), ks=KS)
    assert len(pooled) == 1 and pooled[0].trajectories == 6 and pooled[0].judged == 5
    # pass@k averages over task×model×context cells: (0.5 + 0.0) / 2 for k = 1.
    assert pooled[0].pass_at[1] == 0.25


def test_reference_rows_on_request(single_turn):
    rows = compute_metrics(single_turn, group_by=("model",), include_reference=True)
    expert = _by(rows, model="expert")
    assert expert.correct_and_uses_rate == 1.0 and expert.best_speedup == 1.05


def test_bad_arguments(single_turn):
    with pytest.raises(ValueError, match="cannot group by colour"):
        compute_metrics(single_turn, group_by=("colour",))
    with pytest.raises(ValueError, match="split"):
        compute_metrics(single_turn, split="held-out")
    assert set(GROUP_KEYS) == {"task", "model", "arch", "context", "split", "turns"}


@pytest.fixture
def multi_turn(tmp_path):
    db = open_store(tmp_path / "t.sqlite")
    _task(db, "gemm", "sm_90a")
    m = get_or_create_model(db, "m3")
    run = create_run(db, Run(model_id=m.id, name="turns", context_level="full"))
    # Trajectory A: syntax error, then wrong result, then correct at 1.1×.
    a1 = _add(db, run, "gemm", index=0, turn=1)
    _judge(db, a1, "syntax", compiled=False)
    a2 = _add(db, run, "gemm", index=0, turn=2, parent=a1)
    _judge(db, a2, "wrong_result", compiled=True, correct=False, uses_ptx=True, uses_sass=True)
    a3 = _add(db, run, "gemm", index=0, turn=3, parent=a2)
    _judge(db, a3, "ok", **OK, speedup=1.1, executed=True)
    # Trajectory B: correct but slow (0.9×), then 1.6×.
    b1 = _add(db, run, "gemm", index=1, turn=1)
    _judge(db, b1, "slower_than_baseline", **OK, speedup=0.9)
    b2 = _add(db, run, "gemm", index=1, turn=2, parent=b1)
    _judge(db, b2, "ok", **OK, speedup=1.6)
    # Trajectory C: one wrong turn. Trajectory D: never judged.
    c1 = _add(db, run, "gemm", index=2, turn=1)
    _judge(db, c1, "wrong_result", compiled=True, correct=False, uses_ptx=True, uses_sass=True)
    _add(db, run, "gemm", index=3, turn=1)
    yield db
    db.close()


def test_turn_budgets(multi_turn):
    rows = compute_metrics(multi_turn, group_by=("turns",), ks=KS)
    assert [r.turn_budget for r in rows] == [1, 4, 8]
    one, four, eight = rows
    assert (one.trajectories, one.samples) == (3, 3)
    assert one.compile_rate == pytest.approx(2 / 3)
    assert one.correct_rate == pytest.approx(1 / 3)
    assert one.correct_and_uses_rate == pytest.approx(1 / 3)
    assert one.fast == {0.0: pytest.approx(1 / 3), 1.0: 0.0, 1.5: 0.0}
    assert one.geomean_speedup == pytest.approx(0.9) and one.best_speedup == 0.9
    assert one.executed_rate is None
    assert one.pass_at == {1: pytest.approx(1 / 3), 2: pytest.approx(2 / 3), 3: 1.0}

    assert (four.trajectories, four.samples) == (3, 6)
    assert four.compile_rate == 1.0
    assert four.correct_rate == pytest.approx(2 / 3)
    assert four.fast == {0.0: pytest.approx(2 / 3), 1.0: pytest.approx(2 / 3), 1.5: pytest.approx(1 / 3)}
    # Each solved trajectory brings its best correct turn: A 1.1, B 1.6.
    assert four.geomean_speedup == pytest.approx(math.sqrt(1.1 * 1.6))
    assert four.best_speedup == 1.6
    # Executed was measured on A's last turn only; B and C stay unknown, A is known.
    assert four.executed_rate == 1.0
    assert four.pass_at == {1: pytest.approx(2 / 3), 2: 1.0, 3: 1.0}
    assert {k: v for k, v in eight.as_dict().items() if k != "turn_budget"} == {
        k: v for k, v in four.as_dict().items() if k != "turn_budget"
    }

    # Without a budget every turn counts; with budget 2 trajectory A is not yet solved.
    assert compute_metrics(multi_turn, group_by=())[0].correct_rate == pytest.approx(2 / 3)
    assert compute_metrics(multi_turn, group_by=(), turn_budget=2)[0].correct_rate == pytest.approx(1 / 3)


def test_as_dict_is_flat(multi_turn):
    d = compute_metrics(multi_turn, group_by=("model",), ks=(1,))[0].as_dict()
    assert d["model"] == "m3" and "fast_0" in d and "fast_1" in d and "fast_1.5" in d and "pass@1" in d
    assert all(not isinstance(v, dict) for v in d.values())


def _exact_pass_at_k(n, c, k):
    return float(1 - Fraction(comb(n - c, k), comb(n, k)))


@pytest.mark.parametrize("n,c,k", [(1, 0, 1), (1, 1, 1), (5, 2, 1), (5, 2, 2), (5, 2, 3), (5, 2, 4), (10, 3, 5),
                                   (20, 0, 10), (20, 20, 10), (200, 3, 100), (1000, 1, 1), (1000, 999, 500)])
def test_pass_at_k_matches_the_exact_estimator(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(_exact_pass_at_k(n, c, k), rel=1e-9, abs=1e-12)


def test_pass_at_k_by_hand():
    assert pass_at_k(4, 2, 1) == 0.5
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)   # 1 − C(2,2)/C(4,2) = 1 − 1/6
    assert pass_at_k(10, 1, 10) == 1.0
    assert pass_at_k(10, 0, 3) == 0.0
    for bad in [(3, 4, 1), (3, 1, 4), (3, 1, 0), (3, -1, 1)]:
        with pytest.raises(ValueError):
            pass_at_k(*bad)


def test_geometric_mean():
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert geometric_mean([]) is None
    assert geometric_mean([0.0, -1.0]) is None
