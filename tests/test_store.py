"""Writing and reading records: round trips, append-only evaluations, labels beside
categories, search that never breaks, concurrent readers."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from ptxbench.db.queries import (
    evaluations_for,
    find_sample,
    fixes_for,
    fts_query,
    get_model,
    get_run,
    get_sample,
    get_task,
    labels_for,
    latest_evaluation,
    measurements_for,
    search_samples,
)
from ptxbench.db.records import (
    Evaluation,
    Fix,
    Label,
    Measurement,
    Run,
    Sample,
    Task,
    content_hash,
    from_row,
    to_row,
)
from ptxbench.db.store import StoreLocked, open_store
from ptxbench.db.writes import (
    InvalidRecord,
    add_evaluation,
    add_fix,
    add_label,
    add_sample,
    create_run,
    finish_run,
    get_or_create_model,
    upsert_task,
)

GEMM_PTX = """
.version 8.5
.target sm_90a
.address_size 64
.visible .entry gemm(.param .u64 a) {
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f0}, %rd1, %rd2, 1, 1, 1, 0, 0;
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], %r2;
    cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd4, {%r5, %r6}], [%r7];
    ret;
}
"""


@pytest.fixture
def db(tmp_path):
    db = open_store(tmp_path / "store.sqlite")
    upsert_task(
        db,
        Task(
            id="gemm_bf16_sm90a",
            title="GEMM",
            operation="gemm",
            arch="sm_90a",
            families=["wgmma", "tma", "mbarrier"],
            spec={"sizes": {"headline": {"M": 8192}}},
            source="tasks/specs/gemm_bf16_sm90a.toml",
            expert_path="tasks/solutions/gemm_bf16_sm90a",
        ),
    )
    yield db
    db.close()


def _sample(db, **kw) -> Sample:
    fields = dict(task_id="gemm_bf16_sm90a", language="ptx", source="model:m", code=GEMM_PTX)
    fields.update(kw)
    return add_sample(db, Sample(**fields))


def _judged(sample_id: int, category: str = "ok", **kw) -> Evaluation:
    fields = dict(sample_id=sample_id, engine_version="0.1.0", status="judged", category=category, source="test")
    fields.update(kw)
    return Evaluation(**fields)


def test_task_round_trip_and_upsert(db):
    task = get_task(db, "gemm_bf16_sm90a")
    assert task.families == ["wgmma", "tma", "mbarrier"]
    assert task.spec == {"sizes": {"headline": {"M": 8192}}}
    assert task.updated_at
    upsert_task(db, Task(**{**to_row(task), "families": ["wgmma"], "spec": {}, "title": "GEMM v2", "updated_at": ""}))
    again = get_task(db, "gemm_bf16_sm90a")
    assert (again.title, again.families) == ("GEMM v2", ["wgmma"])
    assert db.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 1


def test_model_run_sample_round_trip(db):
    model = get_or_create_model(db, "qwen3-coder", endpoint="http://127.0.0.1:8000/v1", params={"temperature": 0.2})
    assert get_or_create_model(db, "qwen3-coder").id == model.id
    assert get_model(db, model.id) == get_model(db, "qwen3-coder") == model
    assert model.source == "model:qwen3-coder" and model.params == {"temperature": 0.2}

    run = create_run(db, Run(model_id=model.id, name="r1", context_level="brief", params={"turns": 3}))
    assert get_run(db, run.id).finished_at is None
    finish_run(db, run.id, "2026-11-29T12:00:00+00:00")
    assert get_run(db, run.id).finished_at == "2026-11-29T12:00:00+00:00"

    manifest = {"launches": [{"entry": "gemm", "grid": [56, 64, 1]}]}
    first = _sample(db, run_id=run.id, manifest=manifest, response="```ptx\n...\n```", tokens_in=10, tokens_out=900, latency_s=1.5)
    assert first.model_id == model.id  # taken from the run
    assert first.content_hash == content_hash(GEMM_PTX, manifest)
    second = _sample(db, run_id=run.id, turn=2, parent_id=first.id, code=GEMM_PTX + "// v2")
    assert get_sample(db, first.id) == first
    assert get_sample(db, second.id).parent_id == first.id
    assert find_sample(db, run_id=run.id, task_id="gemm_bf16_sm90a", sample_index=0, turn=2) == second
    assert get_sample(db, 999) is None


def test_content_hash_covers_code_and_manifest():
    a = content_hash("x", None)
    assert a == content_hash("x", None)
    assert a != content_hash("x", {})
    assert a != content_hash("y", None)
    # Key order in the manifest does not matter; values do.
    assert content_hash("x", {"a": 1, "b": 2}) == content_hash("x", {"b": 2, "a": 1})
    assert content_hash("x", {"a": 1}) != content_hash("x", {"a": 2})


def test_evaluation_with_measurements_round_trip(db):
    s = _sample(db)
    ev = add_evaluation(
        db,
        _judged(
            s.id,
            compiled=True, correct=True, correct_heldout=False, uses_ptx=True, uses_sass=True,
            ptx_families=["wgmma", "tma"], resources={"gemm": {"registers": 168}},
            evidence={"worst": [1, 2]}, time_ms=1.25, baseline_ms=1.0, speedup=0.8,
            device="NVIDIA H200", tool_versions={"ptxas": "13.0.88"},
        ),
        [
            Measurement(split="train", sizes={"M": 2048, "N": 2048, "K": 2048}, category="ok", speedup=0.9, time_ms=0.1),
            Measurement(split="heldout", sizes={"M": 4096}, category="wrong_result", max_rel_err=0.3,
                        worst={"index": [3, 4], "got": 1.0, "expected": 2.0}),
        ],
    )
    got = latest_evaluation(db, s.id)
    assert got == ev
    assert got.correct is True and got.correct_heldout is False and got.executed is None
    assert got.stage is None  # "ok" belongs to no failure stage
    ms = measurements_for(db, ev.id)
    assert [m.split for m in ms] == ["train", "heldout"]
    assert ms[1].worst == {"index": [3, 4], "got": 1.0, "expected": 2.0}
    assert all(m.evaluation_id == ev.id for m in ms)


def test_evaluations_are_append_only(db):
    s = _sample(db)
    first = add_evaluation(db, _judged(s.id, "wrong_result"))
    assert first.stage == "verify"  # filled from the vocabulary
    second = add_evaluation(db, _judged(s.id, "ok", correct=True))
    assert latest_evaluation(db, s.id).id == second.id
    assert [e.id for e in evaluations_for(db, s.id)] == [second.id, first.id]
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        db.execute("UPDATE evaluations SET category = 'ok' WHERE id = ?", [first.id])
    with pytest.raises(InvalidRecord, match="append-only"):
        add_evaluation(db, first)
    assert latest_evaluation(db, s.id).category == "ok"
    assert evaluations_for(db, s.id)[1].category == "wrong_result"


def test_evaluation_and_measurements_land_together_or_not_at_all(db):
    s = _sample(db)
    bad = Measurement(split="train", sizes={}, category="ok")
    bad.sizes = None  # type: ignore[assignment]  # NOT NULL column: the insert fails after the evaluation row
    with pytest.raises(Exception):
        add_evaluation(db, _judged(s.id), [Measurement(split="train", sizes={"M": 1}, category="ok"), bad])
    assert db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 0
    assert db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 0


def test_bad_records_are_refused_with_clear_messages(db):
    with pytest.raises(InvalidRecord, match="unknown task 'nope'"):
        add_sample(db, Sample(task_id="nope", language="ptx", source="x"))
    with pytest.raises(InvalidRecord, match="source is empty"):
        add_sample(db, Sample(task_id="gemm_bf16_sm90a", language="ptx", source=""))
    with pytest.raises(InvalidRecord, match="language"):
        add_sample(db, Sample(task_id="gemm_bf16_sm90a", language="python", source="x"))
    with pytest.raises(InvalidRecord, match="parent 77"):
        _sample(db, parent_id=77)
    s = _sample(db)
    with pytest.raises(InvalidRecord, match="not ok or a vocabulary word"):
        add_evaluation(db, _judged(s.id, "kinda_ok"))
    with pytest.raises(InvalidRecord, match="split"):
        add_evaluation(db, _judged(s.id), [Measurement(split="held-out", sizes={}, category="ok")])
    with pytest.raises(InvalidRecord, match="context_level"):
        create_run(db, Run(model_id=get_or_create_model(db, "m").id, name="r", context_level="medium"))
    assert db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 0
    assert db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 1


def test_label_sits_beside_the_automatic_category(db):
    s = _sample(db)
    add_evaluation(db, _judged(s.id, "wrong_result"))
    first = add_label(db, Label(sample_id=s.id, author="ana", category="suspected_reward_hack", note="output ignores B"))
    second = add_label(db, Label(sample_id=s.id, author="ben", fixit_candidate=True))
    assert latest_evaluation(db, s.id).category == "wrong_result"
    assert labels_for(db, s.id) == [second, first]
    assert second.fixit_candidate is True
    with pytest.raises(InvalidRecord, match="vocabulary"):
        add_label(db, Label(sample_id=s.id, author="ana", category="meh"))


def test_fix_links_two_samples(db):
    failed = _sample(db, source="mutation of expert:gemm_bf16_sm90a (dropped mbarrier wait)")
    fixed = _sample(db, source="expert", code=GEMM_PTX + "\n// fixed")
    fix = add_fix(db, Fix(failed_sample_id=failed.id, fixed_sample_id=fixed.id,
                          explanation="wait on the barrier before reading the tile",
                          explanation_source="written with the mutation", source="seed"))
    assert fixes_for(db, failed.id) == [fix] == fixes_for(db, fixed.id)
    with pytest.raises(InvalidRecord, match="two different samples"):
        add_fix(db, Fix(failed_sample_id=failed.id, fixed_sample_id=failed.id, explanation="x",
                        explanation_source="x", source="x"))


def test_row_converters_ignore_unknown_columns_and_fill_empty_json():
    row = {"sample_id": 1, "engine_version": "v", "status": "static", "category": "ok", "source": "s",
           "ptx_families": None, "evidence": "", "compiled": 1, "a_future_column": 3}
    ev = from_row(Evaluation, row)
    assert ev.ptx_families == [] and ev.evidence == {} and ev.compiled is True
    assert to_row(ev)["compiled"] == 1 and "id" not in to_row(ev)


def test_search_finds_code_response_source_and_evidence(db):
    a = _sample(db, response="I used setmaxnreg to rebalance registers")
    b = _sample(db, code="mov.u32 %r1, 0;", source="mutation of expert:gemm_bf16_sm90a (wrong swizzle)")
    add_evaluation(db, _judged(b.id, "syntax", assembler_log="ptxas fatal : Unresolved extern function 'vprintf'",
                               evidence={"line": 12, "message": "Parsing error near '}'"}))
    assert [s.id for s in search_samples(db, "cp.async.bulk.tensor")] == [a.id]
    assert [s.id for s in search_samples(db, "mbarrier::complete_tx::bytes")] == [a.id]
    assert [s.id for s in search_samples(db, "setmaxnreg")] == [a.id]
    assert [s.id for s in search_samples(db, "swizzle")] == [b.id]
    assert [s.id for s in search_samples(db, "vprintf")] == [b.id]
    assert [s.id for s in search_samples(db, "syntax")] == [b.id]
    assert search_samples(db, "vprintf", include_evaluations=False) == []
    assert [s.id for s in search_samples(db, "wgm*")] == [a.id]
    assert {s.id for s in search_samples(db, "gemm_bf16_sm90a")} == {b.id}  # in b's source only
    assert search_samples(db, "wgmma", task_id="other") == []
    # Samples added later are indexed at once (triggers keep the index in step).
    c = _sample(db, code="tcgen05.mma.cta_group::1.kind::f16")
    assert [s.id for s in search_samples(db, "tcgen05.mma")] == [c.id]


@pytest.mark.parametrize(
    "text",
    [
        "'; DROP TABLE samples; --",
        '"unbalanced',
        "unbalanced\"",
        "NEAR(wgmma",
        "wgmma AND",
        "OR",
        "*",
        "**",
        '"',
        '""',
        "col:umn",
        "code:wgmma",
        "^start",
        "a -b",
        "(((",
        "%_\\",
        "\x00",
        "",
        "   ",
        "wgmma\u00e9\u4e2d\U0001F600",
    ],
)
def test_search_never_raises_on_hostile_text(db, text):
    _sample(db)
    hits = search_samples(db, text)
    assert isinstance(hits, list)
    assert db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 1  # nothing dropped


def test_fts_query_quotes_every_word():
    assert fts_query('wgmma "x') == '"wgmma" """x"'
    assert fts_query("tma*") == '"tma"*'
    assert fts_query("  ") == ""


def test_readers_are_not_blocked_by_a_writer(tmp_path, db):
    path = tmp_path / "store.sqlite"
    s = _sample(db)
    writer = open_store(path)
    writer.conn.execute("BEGIN IMMEDIATE")
    writer.execute("DELETE FROM samples WHERE id = ?", [s.id])
    seen: list[object] = []

    def read():
        reader = open_store(path, readonly=True)  # each thread its own connection
        seen.append(get_sample(reader, s.id))
        reader.close()

    t = threading.Thread(target=read)
    t.start()
    t.join(5)
    writer.conn.execute("ROLLBACK")
    assert seen == [s]


def test_second_writer_gives_a_clear_locked_error(tmp_path, db):
    path = tmp_path / "store.sqlite"
    other = open_store(path, timeout=0.2)
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreLocked, match="locked by another writer"):
            _sample(other)
    finally:
        db.conn.execute("ROLLBACK")
    _sample(other)  # and works once the lock is gone


def test_bulk_load_indexes_once_and_restores_the_triggers(db):
    from ptxbench.db.writes import bulk_load, insert_many

    rows = [Sample(task_id="gemm_bf16_sm90a", language="ptx", source="bulk", code=f"// bulk {i} stmatrix",
                   content_hash=content_hash(f"// bulk {i} stmatrix", None), created_at="2026-11-29", id=100 + i)
            for i in range(50)]
    with bulk_load(db):
        insert_many(db, rows)
        insert_many(db, [Evaluation(sample_id=100, engine_version="v", status="static", category="syntax",
                                    source="bulk", assembler_log="ptxas: bulk log", id=500)])
    assert len(search_samples(db, "stmatrix", limit=100)) == 50
    assert [s.id for s in search_samples(db, "bulk log")] == [100]
    triggers = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert {"samples_ai", "evaluations_ai"} <= triggers
    later = _sample(db, code="// after the bulk load ldmatrix")
    assert [s.id for s in search_samples(db, "ldmatrix")] == [later.id]

    # A failed bulk load leaves nothing behind, triggers included.
    with pytest.raises(InvalidRecord):
        with bulk_load(db):
            insert_many(db, [Sample(task_id="gemm_bf16_sm90a", language="ptx", source="x", content_hash="h",
                                    created_at="t", id=later.id)])  # the id is taken
    assert {"samples_ai", "evaluations_ai"} <= {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    with pytest.raises(InvalidRecord, match="one type"):
        insert_many(db, [rows[0], Label(sample_id=1, author="a")])


def test_big_store_generator_labels_everything_synthetic(tmp_path):
    import importlib.util
    from pathlib import Path

    from ptxbench.db.metrics import compute_metrics

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "make_big_store.py"
    spec = importlib.util.spec_from_file_location("make_big_store", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp_path / "big.sqlite"
    assert module.main([str(path), "-n", "400"]) == 0
    db = open_store(path, readonly=True)
    assert db.execute("SELECT COUNT(*) FROM samples WHERE source = ?", [module.SOURCE]).fetchone()[0] == 400
    assert db.execute("SELECT COUNT(*) FROM samples WHERE source != ? AND source != 'expert'", [module.SOURCE]).fetchone()[0] == 0
    assert {r[0] for r in db.execute("SELECT DISTINCT kind FROM models WHERE name LIKE 'synthetic-%'")} == {"synthetic"}
    assert {r[0] for r in db.execute("SELECT DISTINCT source FROM evaluations")} == {module.SOURCE}
    assert "not model output" in db.execute("SELECT value FROM meta WHERE key = 'synthetic'").fetchone()[0]
    assert search_samples(db, "synthetic benchmark fixture", limit=5)
    rows = compute_metrics(db, group_by=("model",))
    assert [r.model for r in rows] == ["synthetic-a", "synthetic-b", "synthetic-c"]
    assert all(0 <= r.correct_rate <= 1 for r in rows)
    assert module.main([str(path), "-n", "10"]) == 2  # refuses to replace without --force
