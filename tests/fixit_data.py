"""Real SQLite stores for the Fixit tests, built from the repository's own kernels.

The kernels are the expert solutions and the mutation variants of tasks/; a
"model" here is a test fixture whose samples are those kernels, and every
evaluation row says it is fixture data (`FIXTURE`), never a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ptxbench.db.queries import find_sample
from ptxbench.db.records import Evaluation, Fix, Measurement, Run, Sample
from ptxbench.db.seed import find_seeded_sample, seed_store
from ptxbench.db.store import open_store
from ptxbench.db.writes import add_evaluation, add_fix, add_sample, create_run, get_or_create_model
from ptxbench.tasks.mutations import apply, load_mutations
from ptxbench.tasks.spec import get_task

FIXTURE = "fixture: tests/fixit_data.py (not a measurement)"
SOLUTIONS = Path(__file__).resolve().parents[1] / "tasks" / "solutions"


def expert_code(task_id: str) -> str:
    return (SOLUTIONS / task_id / "kernel.ptx").read_text()


def mutation(mid: str):
    m = next(m for m in load_mutations() if m.id == mid)
    return m, apply(m)


def judge_row(db, sample_id: int, category: str, *, task_id: str, correct: bool | None = None,
              correct_heldout: bool | None = None, status: str = "judged", device: str | None = "fixture GPU",
              evidence: dict | None = None, heldout_category: str | None = None) -> Evaluation:
    """An evaluation row for a fixture sample, with one measurement per size of the task."""
    spec = get_task(task_id)
    passing = category in ("ok", "slower_than_baseline")
    if correct is None and status == "judged":
        correct = passing
    measurements = []
    if status == "judged" and category not in ("syntax", "ptx_version", "target_mismatch", "undefined_symbol"):
        for split, sizes in spec.all_sizes():
            cat = category if split == "train" else (heldout_category or ("ok" if correct_heldout else category))
            measurements.append(Measurement(split=split, sizes=dict(sizes), category=cat,
                                            max_rel_err=0.5 if cat == "wrong_result" else 0.001))
    ev = Evaluation(sample_id=sample_id, engine_version="fixture", status=status, category=category,
                    source=FIXTURE, device=device if status == "judged" else "cpu (static stages only)",
                    compiled=category not in ("syntax", "ptx_version", "target_mismatch", "undefined_symbol"),
                    correct=correct, correct_heldout=correct_heldout, evidence=evidence or {})
    return add_evaluation(db, ev, measurements)


@dataclass
class Built:
    path: Path
    ids: dict[str, int] = field(default_factory=dict)


def new_store(tmp_path: Path):
    path = tmp_path / "store.sqlite"
    db = open_store(path)
    empty = tmp_path / "seed"
    empty.mkdir(exist_ok=True)
    seed_store(db, empty)
    return db, path


def expert_id(db, task_id: str) -> int:
    return find_seeded_sample(db, f"expert:{task_id}").id


def pass_experts(db, task_ids, *, static: bool = False) -> None:
    for t in task_ids:
        if static:
            judge_row(db, expert_id(db, t), "ok", task_id=t, status="static", correct=None)
        else:
            judge_row(db, expert_id(db, t), "ok", task_id=t, correct=True, correct_heldout=True)


def add_mutant(db, mid: str, *, category: str | None = None, heldout_only: bool = False) -> tuple[int, int]:
    """A mutation variant as a sample, its evaluation, and its recorded fix (to the expert)."""
    m, v = mutation(mid)
    model = get_or_create_model(db, "mutation", kind="mutation")
    import json

    s = add_sample(db, Sample(task_id=m.task, language="ptx", code=v.code,
                              manifest=json.loads(v.manifest) if v.manifest else None,
                              source=m.source, model_id=model.id))
    cat = category or m.expect
    if heldout_only:
        judge_row(db, s.id, "ok", task_id=m.task, correct=True, correct_heldout=False, heldout_category=cat)
    else:
        judge_row(db, s.id, cat, task_id=m.task, correct=False, correct_heldout=False,
                  evidence={"message": f"{cat} (fixture)"})
    fix = add_fix(db, Fix(failed_sample_id=s.id, fixed_sample_id=expert_id(db, m.task), explanation=m.fix,
                          explanation_source="written with the mutation", source="tasks/mutations.toml"))
    return s.id, fix.id


def model_run(db, model: str = "fixture-model", context: str = "brief") -> Run:
    mdl = get_or_create_model(db, model, kind="model", source=FIXTURE)
    return create_run(db, Run(model_id=mdl.id, name=f"{model} run", context_level=context, source=FIXTURE))


def add_turn(db, run: Run, task_id: str, code: str, *, index: int = 0, turn: int = 1, parent: int | None = None,
             manifest: dict | None = None) -> int:
    s = add_sample(db, Sample(task_id=task_id, language="ptx", code=code, manifest=manifest, source=FIXTURE,
                              run_id=run.id, sample_index=index, turn=turn, parent_id=parent))
    return s.id


def broken(code: str, find: str, replace: str) -> str:
    assert find in code, find
    return code.replace(find, replace, 1)


def trajectory_store(tmp_path: Path) -> Built:
    """A model's trajectories on vector_add: a failure fixed in its next turn, a failure fixed
    only by another trajectory, a failure whose only fix is static, and a duplicate failure."""
    db, path = new_store(tmp_path)
    built = Built(path)
    pass_experts(db, ["vector_add_smoke"])
    run = model_run(db)
    good = expert_code("vector_add_smoke")
    _, wrong_op = mutation("add-wrong-op")
    _, no_store = mutation("add-dropped-store")
    # trajectory 0: wrong result, then fixed in turn 2 (the fix differs from the expert by a comment)
    t1 = add_turn(db, run, "vector_add_smoke", wrong_op.code, index=0)
    judge_row(db, t1, "wrong_result", task_id="vector_add_smoke")
    t2 = add_turn(db, run, "vector_add_smoke", good + "\n// second turn\n", index=0, turn=2, parent=t1)
    judge_row(db, t2, "ok", task_id="vector_add_smoke", correct_heldout=True)
    # trajectory 1: unwritten output, never fixed in its own trajectory
    u1 = add_turn(db, run, "vector_add_smoke", no_store.code, index=1)
    judge_row(db, u1, "unwritten_output", task_id="vector_add_smoke")
    # trajectory 2: a passing sample of the same model (the partner for trajectory 1)
    p1 = add_turn(db, run, "vector_add_smoke", good + "\n// third trajectory\n", index=2)
    judge_row(db, p1, "ok", task_id="vector_add_smoke", correct_heldout=True)
    # rmsnorm: a failure whose only passing partner was judged statically
    _, rms_wrong = mutation(next(m.id for m in load_mutations() if m.task == "rmsnorm_bf16_sm90a"))
    r1 = add_turn(db, run, "rmsnorm_bf16_sm90a", rms_wrong.code, index=0)
    judge_row(db, r1, "wrong_result", task_id="rmsnorm_bf16_sm90a")
    r2 = add_turn(db, run, "rmsnorm_bf16_sm90a", expert_code("rmsnorm_bf16_sm90a") + "\n// static\n", index=0,
                  turn=2, parent=r1)
    judge_row(db, r2, "ok", task_id="rmsnorm_bf16_sm90a", status="static", correct=None)
    built.ids.update(t1=t1, t2=t2, u1=u1, p1=p1, r1=r1, r2=r2)
    db.conn.close()
    return built


def find(db, run_id: int, task_id: str, index: int, turn: int) -> int:
    return find_sample(db, run_id=run_id, task_id=task_id, sample_index=index, turn=turn).id


# -- records without a store (selection and export work on these) ---------------------------------

from ptxbench.fixit.records import FixitSample, Pair, SizeResult  # noqa: E402


def rec(sid: int, task_id: str, code: str, *, category: str = "wrong_result", model: str | None = "m",
        kind: str = "model", correct_heldout: bool | None = None, static: bool = False,
        heldout_category: str | None = None) -> FixitSample:
    """A judged sample as db/fixit.py would load it, with one measurement per size."""
    spec = get_task(task_id)
    passing = category in ("ok", "slower_than_baseline")
    sizes = []
    for split, s in spec.all_sizes():
        if split == "train":
            cat = category
        else:
            cat = heldout_category or ("ok" if (correct_heldout or (passing and correct_heldout is None)) else category)
        sizes.append(SizeResult(split, dict(s), cat, 0.5 if cat == "wrong_result" else 0.001))
    return FixitSample(
        id=sid, task_id=task_id, arch=spec.arch, language="ptx", code=code, model=model, model_kind=kind,
        evaluation_id=sid, status="static" if static else "judged", category=category,
        correct=None if static else passing,
        correct_heldout=None if static else (correct_heldout if correct_heldout is not None else passing),
        device=None if static else "fixture GPU", sizes=[] if static else sizes, context_level="brief",
    )


def pair_of(failed: FixitSample, fixed: FixitSample, kind: str = "same_model", explanation: str | None = None,
            source: str | None = None) -> Pair:
    return Pair(failed, fixed, kind, explanation=explanation, explanation_source=source)


def variants(code: str, n: int, marker: str = "ret;", start: int = 0) -> list[str]:
    """n kernels that differ from `code` and from each other in a real instruction each
    (numbered from `start`, so two calls with different starts share none)."""
    assert marker in code
    return [code.replace(marker, f"mov.u32 %r{900 + i}, {i * 7 + 1};\n\t{marker}", 1) for i in range(start, start + n)]
