"""Seeding: tasks and expert solutions from the repository, seed files built here,
idempotence, and rows a person added never touched."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from ptxbench.db.queries import (
    evaluations_for,
    fixes_for,
    get_sample,
    get_task,
    labels_for,
    latest_evaluation,
    measurements_for,
)
from ptxbench.db.records import Evaluation, Label, Sample
from ptxbench.db.seed import (
    SeedError,
    ensure_default_store,
    find_seeded_sample,
    seed_fingerprint,
    seed_store,
)
from ptxbench.db.store import get_meta, open_store
from ptxbench.db.writes import add_evaluation, add_label, add_sample, get_or_create_model
from ptxbench.tasks.spec import all_tasks, load_task

REPO_SPEC = Path(__file__).resolve().parents[1] / "tasks" / "specs" / "gemm_bf16_sm90a.toml"
EXPERT_PTX = ".version 8.5\n.target sm_90a\n.address_size 64\n.visible .entry gemm() { ret; }\n"
MUTANT_PTX = EXPERT_PTX.replace("ret;", "bra.uni DONE;\nret;")


class SpecAt:
    """A loaded task spec whose expert solution lives in a folder of the test's choosing."""

    def __init__(self, spec, expert: Path | None) -> None:
        self._spec = spec
        self._expert = expert

    def __getattr__(self, name):
        return getattr(self._spec, name)

    def expert_dir(self):
        return self._expert


@pytest.fixture
def spec(tmp_path):
    path = tmp_path / "specs" / "gemm_bf16_sm90a.toml"
    path.parent.mkdir()
    shutil.copy(REPO_SPEC, path)
    expert = tmp_path / "solutions" / "gemm_bf16_sm90a"
    expert.mkdir(parents=True)
    (expert / "kernel.ptx").write_text(EXPERT_PTX)
    (expert / "manifest.json").write_text(json.dumps({"launches": [{"entry": "gemm"}]}))
    return SpecAt(load_task(path), expert)


def _seed_dir(tmp_path: Path, doc: dict, name: str = "corpus.json") -> Path:
    folder = tmp_path / "seed"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(json.dumps(doc, indent=1))
    return folder


def _evaluation(category="ok", **kw):
    e = {"engine_version": "0.1.0", "status": "judged", "category": category, "device": "NVIDIA H200",
         "source": "recorded: scripts/record.py on NVIDIA H200, 2026-11-29", "created_at": "2026-11-29T10:00:00+00:00"}
    e.update(kw)
    return e


def _corpus() -> dict:
    return {
        "format": 1,
        "description": "a small corpus for the tests",
        "samples": [
            {
                "seed_key": "mutation:gemm_bf16_sm90a:dropped-wait",
                "task_id": "gemm_bf16_sm90a",
                "model": "mutation",
                "language": "ptx",
                "code_path": "mutant.ptx",
                "manifest": {"launches": [{"entry": "gemm"}]},
                "source": "mutation of expert:gemm_bf16_sm90a (dropped mbarrier wait)",
                "evaluations": [
                    _evaluation("wrong_result", compiled=True, correct=False, uses_ptx=True, uses_sass=True,
                                evidence={"max_rel_err": 0.7},
                                measurements=[{"split": "train", "sizes": {"M": 2048, "N": 2048, "K": 2048},
                                               "category": "wrong_result", "max_rel_err": 0.7}]),
                ],
            }
        ],
        "evaluations": [
            {"sample": "expert:gemm_bf16_sm90a", "seed_key": "h200-2026-11-29",
             **_evaluation(compiled=True, correct=True, correct_heldout=True, uses_ptx=True, uses_sass=True,
                           speedup=0.97, time_ms=1.1, baseline_ms=1.07,
                           measurements=[{"split": "train", "sizes": {"M": 8192, "N": 7168, "K": 5120},
                                          "category": "ok", "speedup": 0.97}])},
        ],
        "fixes": [
            {"seed_key": "fix:dropped-wait", "failed": "mutation:gemm_bf16_sm90a:dropped-wait",
             "fixed": "expert:gemm_bf16_sm90a",
             "explanation": "Wait on the full barrier before the wgmma reads the tile.",
             "explanation_source": "written with the mutation", "source": "tasks/mutations.toml"},
        ],
    }


def _counts(db) -> dict[str, int]:
    return {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
            for t in ("tasks", "models", "runs", "samples", "evaluations", "measurements", "fixes", "labels")}


def test_tasks_alone_from_the_repository(tmp_path):
    db = open_store(tmp_path / "s.sqlite")
    report = seed_store(db, tmp_path / "no-seed-files")
    specs = all_tasks()
    assert report.tasks_added == len(specs) == _counts(db)["tasks"]
    gemm = get_task(db, "gemm_bf16_sm90a")
    assert gemm.source == "tasks/specs/gemm_bf16_sm90a.toml"
    assert gemm.families == ["wgmma", "tma", "mbarrier"] and gemm.spec["sizes"]["headline"]["M"] == 8192
    # Every expert solution shipped as PTX becomes a sample that says it is the expert's.
    shipped = [t for t in specs if t.expert_dir() and (t.expert_dir() / "kernel.ptx").is_file()]
    assert report.samples == len(shipped)
    for t in shipped:
        s = find_seeded_sample(db, f"expert:{t.id}")
        assert s.source == "expert" and s.code == (t.expert_dir() / "kernel.ptx").read_text()
        assert get_task(db, t.id).expert_path == f"tasks/solutions/{t.id}"
    again = seed_store(db, tmp_path / "no-seed-files")
    assert again.inserted == 0 and again.tasks_added == again.tasks_updated == 0


def test_seed_files_land_with_provenance(tmp_path, spec):
    folder = _seed_dir(tmp_path, _corpus())
    (folder / "mutant.ptx").write_text(MUTANT_PTX)
    db = open_store(tmp_path / "s.sqlite")
    report = seed_store(db, folder, tasks=[spec])
    assert (report.tasks_added, report.models, report.samples, report.evaluations, report.measurements,
            report.fixes) == (1, 2, 2, 2, 2, 1)

    expert = find_seeded_sample(db, "expert:gemm_bf16_sm90a")
    assert expert.code == EXPERT_PTX and expert.manifest == {"launches": [{"entry": "gemm"}]}
    assert expert.source == "expert"
    ev = latest_evaluation(db, expert.id)
    assert ev.speedup == 0.97 and ev.device == "NVIDIA H200" and ev.source.startswith("recorded: ")
    assert ev.created_at == "2026-11-29T10:00:00+00:00"

    mutant = find_seeded_sample(db, "mutation:gemm_bf16_sm90a:dropped-wait")
    assert mutant.code == MUTANT_PTX and mutant.source.startswith("mutation of expert:")
    mev = latest_evaluation(db, mutant.id)
    assert mev.category == "wrong_result" and mev.stage == "verify"
    assert [m.max_rel_err for m in measurements_for(db, mev.id)] == [0.7]
    [fix] = fixes_for(db, mutant.id)
    assert (fix.failed_sample_id, fix.fixed_sample_id) == (mutant.id, expert.id)
    kinds = dict(db.execute("SELECT name, kind FROM models").fetchall())
    assert kinds == {"expert": "expert", "mutation": "mutation"}
    assert get_task(db, "gemm_bf16_sm90a").expert_path == str(spec.expert_dir())  # outside the repository


def test_reseeding_is_idempotent_and_spares_what_a_person_added(tmp_path, spec):
    folder = _seed_dir(tmp_path, _corpus())
    (folder / "mutant.ptx").write_text(MUTANT_PTX)
    db = open_store(tmp_path / "s.sqlite")
    seed_store(db, folder, tasks=[spec])
    before = _counts(db)

    # A person's own rows: a model, a sample, a re-verification of a seeded sample, a label.
    mine = get_or_create_model(db, "my-model")
    my_sample = add_sample(db, Sample(task_id="gemm_bf16_sm90a", language="ptx", source="model:my-model",
                                      code="// mine", model_id=mine.id))
    expert = find_seeded_sample(db, "expert:gemm_bf16_sm90a")
    reverify = add_evaluation(db, Evaluation(sample_id=expert.id, engine_version="0.2.0", status="static",
                                             category="ok", source="ptxbench eval"))
    label = add_label(db, Label(sample_id=expert.id, author="ana", note="fast"))

    report = seed_store(db, folder, tasks=[spec])
    assert report.inserted == 0 and report.already_present == 5
    after = _counts(db)
    assert after == {**before, "models": before["models"] + 1, "samples": before["samples"] + 1,
                     "evaluations": before["evaluations"] + 1, "labels": 1}
    assert get_sample(db, my_sample.id) == my_sample
    assert latest_evaluation(db, expert.id) == reverify
    assert labels_for(db, expert.id) == [label]


def test_changed_seed_entries_are_added_beside_the_old_rows(tmp_path, spec):
    doc = _corpus()
    folder = _seed_dir(tmp_path, doc)
    (folder / "mutant.ptx").write_text(MUTANT_PTX)
    db = open_store(tmp_path / "s.sqlite")
    seed_store(db, folder, tasks=[spec])
    expert = find_seeded_sample(db, "expert:gemm_bf16_sm90a")
    first = latest_evaluation(db, expert.id)

    # The recorded evaluation is re-measured under the same key: a new row, the old one stays.
    doc["evaluations"][0]["speedup"] = 1.01
    _seed_dir(tmp_path, doc)
    report = seed_store(db, folder, tasks=[spec])
    assert (report.samples, report.evaluations) == (0, 1)
    assert latest_evaluation(db, expert.id).speedup == 1.01
    assert [e.speedup for e in evaluations_for(db, expert.id)] == [1.01, 0.97]
    assert evaluations_for(db, expert.id)[1] == first

    # The mutant's code changes: a new sample (with its evaluation), the old sample kept.
    old_mutant = find_seeded_sample(db, "mutation:gemm_bf16_sm90a:dropped-wait")
    (folder / "mutant.ptx").write_text(MUTANT_PTX + "// v2\n")
    report = seed_store(db, folder, tasks=[spec])
    assert (report.samples, report.evaluations, report.fixes) == (1, 1, 1)
    new_mutant = find_seeded_sample(db, "mutation:gemm_bf16_sm90a:dropped-wait")
    assert new_mutant.id != old_mutant.id and get_sample(db, old_mutant.id) == old_mutant
    assert latest_evaluation(db, new_mutant.id).category == "wrong_result"
    assert fixes_for(db, new_mutant.id)[0].fixed_sample_id == expert.id
    assert len(fixes_for(db, old_mutant.id)) == 1


def test_turns_runs_and_declared_models(tmp_path, spec):
    doc = {
        "models": [{"seed_key": "model:recorded-x", "name": "recorded-x", "kind": "import",
                    "source": "import:results/x.jsonl"}],
        "runs": [{"seed_key": "run:x", "model": "recorded-x", "name": "x brief", "context_level": "brief",
                  "source": "import:results/x.jsonl"}],
        # The second turn is listed first: seeding puts parents first.
        "samples": [
            {"seed_key": "x:t2", "task_id": "gemm_bf16_sm90a", "run": "run:x", "language": "ptx", "code": "b",
             "turn": 2, "parent": "x:t1", "source": "import:results/x.jsonl"},
            {"seed_key": "x:t1", "task_id": "gemm_bf16_sm90a", "run": "run:x", "language": "none", "code": "",
             "response": "I cannot do that", "source": "import:results/x.jsonl",
             "evaluations": [_evaluation("no_candidate", compiled=False)]},
        ],
    }
    db = open_store(tmp_path / "s.sqlite")
    seed_store(db, _seed_dir(tmp_path, doc), tasks=[spec])
    t1, t2 = find_seeded_sample(db, "x:t1"), find_seeded_sample(db, "x:t2")
    assert t2.parent_id == t1.id and t2.turn == 2 and t1.run_id == t2.run_id
    assert t1.model_id == db.execute("SELECT id FROM models WHERE name = 'recorded-x'").fetchone()[0]
    assert db.execute("SELECT context_level, seed_key FROM runs").fetchall() == [("brief", "run:x")]
    assert latest_evaluation(db, t1.id).seed_key.startswith("x:t1#eval0@")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["samples"][0].update(task_id="no_such_task"), "unknown task 'no_such_task'"),
        (lambda d: d["samples"][0].update(code_path="missing.ptx"), "'missing.ptx' not found"),
        (lambda d: d["samples"][0].update(code_path="../../etc/passwd"), "relative path inside the repository"),
        (lambda d: d["samples"][0].update(colour="red"), "samples[0].colour: unknown field"),
        (lambda d: d["samples"][0].update(parent="nobody"), "unknown parent sample 'nobody'"),
        (lambda d: d["samples"][0].update(model="gpt-x"), "unknown model 'gpt-x'"),
        (lambda d: d["samples"][0].pop("source"), "missing 'source'"),
        (lambda d: d["samples"][0]["evaluations"][0].update(category="meh"), "'meh' is not ok or a vocabulary word"),
        (lambda d: d["samples"][0]["evaluations"][0]["measurements"][0].update(split="held-out"), "split must be"),
        (lambda d: d["fixes"][0].update(fixed="ghost"), "unknown sample 'ghost'"),
        (lambda d: d["evaluations"][0].update(sample="ghost"), "unknown sample 'ghost'"),
        (lambda d: d.update(format=9), "unknown seed format 9"),
        (lambda d: d["fixes"].append(dict(d["fixes"][0])), "fix seed_key 'fix:dropped-wait' is also used"),
    ],
)
def test_bad_seed_data_names_the_problem_and_writes_nothing(tmp_path, spec, mutate, message):
    doc = _corpus()
    mutate(doc)
    folder = _seed_dir(tmp_path, doc)
    (folder / "mutant.ptx").write_text(MUTANT_PTX)
    db = open_store(tmp_path / "s.sqlite")
    with pytest.raises(SeedError, match="corpus.json") as info:
        seed_store(db, folder, tasks=[spec])
    assert message in str(info.value)
    assert sum(_counts(db).values()) == 0


def test_file_that_is_not_json(tmp_path, spec):
    folder = tmp_path / "seed"
    folder.mkdir()
    (folder / "broken.json").write_text('{"samples": [')
    db = open_store(tmp_path / "s.sqlite")
    with pytest.raises(SeedError, match="broken.json: not valid JSON"):
        seed_store(db, folder, tasks=[spec])


def test_ensure_default_store_seeds_once_and_again_when_data_changes(tmp_path, spec, monkeypatch, caplog):
    monkeypatch.setenv("PTXBENCH_DB", str(tmp_path / "home" / "ptxbench.sqlite"))
    folder = _seed_dir(tmp_path, _corpus())
    (folder / "mutant.ptx").write_text(MUTANT_PTX)
    db = ensure_default_store(seed_dir=folder, tasks=[spec])
    assert (tmp_path / "home" / "ptxbench.sqlite").exists()
    assert get_meta(db, "seed_digest") == seed_fingerprint(folder, [spec])
    seeded_at = get_meta(db, "seeded_at")
    counts = _counts(db)
    assert counts["samples"] == 2 and counts["evaluations"] == 2
    db.close()

    db = ensure_default_store(seed_dir=folder, tasks=[spec])  # nothing changed: nothing done
    assert get_meta(db, "seeded_at") == seeded_at and _counts(db) == counts
    db.close()

    doc = _corpus()
    doc["evaluations"][0]["speedup"] = 1.02
    _seed_dir(tmp_path, doc)
    db = ensure_default_store(seed_dir=folder, tasks=[spec])
    assert _counts(db)["evaluations"] == 3
    db.close()

    # A broken seed file: logged and noted, and the store still opens with what it has.
    (folder / "zz-broken.json").write_text("[")
    with caplog.at_level(logging.WARNING, logger="ptxbench.db.seed"):
        db = ensure_default_store(seed_dir=folder, tasks=[spec])
    assert "zz-broken.json" in get_meta(db, "seed_error")
    assert "not seeded" in caplog.text
    assert _counts(db)["evaluations"] == 3
