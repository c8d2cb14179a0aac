"""The explorer's read queries (db/browse.py) on the fixture store."""

from __future__ import annotations

import pytest

from ptxbench.db import browse
from ptxbench.db import browse_summary as summary
from ptxbench.db.metrics import compute_metrics
from ptxbench.db.store import open_store


@pytest.fixture
def conn(store):
    c = browse.connect(store, cached=False)
    yield c
    c.close()


def by_key(rows):
    return {(r.model, r.task_id, r.context_level): r for r in rows}


def test_overview_rates(conn):
    rows = by_key(summary.overview(summary.cells(conn)))
    a_brief = rows[("fixture-model-a", "gemm_bf16_sm90a", "brief")]
    assert (a_brief.samples, a_brief.correct, a_brief.uses, a_brief.best_speedup) == (2, 0.5, 1.0, 0.91)
    mutation = rows[("mutation", "vector_add_smoke", "none")]
    assert (mutation.compiled, mutation.correct) == (0.0, 0.0)  # did not assemble: not reached counts as false
    skipped = rows[("fixture-model-a", "gemm_bf16_sm100a", "full")]
    assert skipped.skipped == 1 and skipped.correct is None  # a hardware skip is neither pass nor failure
    b = rows[("fixture-model-b", "gemm_bf16_sm90a", "brief")]
    assert b.fast_1 == 0.0 and b.geomean_speedup == pytest.approx((0.64 * 0.58) ** 0.5)
    folded = summary.overview(summary.cells(conn), summary.OverviewFilter(model="fixture-model-a"), by_level=False)
    assert {r.context_level for r in folded} == {"*"}


def test_overview_agrees_with_db_metrics_for_single_turn_groups(store, conn):
    db = open_store(store, readonly=True)
    metrics = {
        (m.model, m.task, m.context): m
        for m in compute_metrics(db, group_by=("task", "model", "arch", "context"), include_reference=True)
    }
    ours = by_key(summary.overview(summary.cells(conn)))
    for key in [("fixture-model-b", "gemm_bf16_sm90a", "brief"), ("fixture-model-a", "vector_add_smoke", "full"),
                ("mutation", "vector_add_smoke", "none"), ("fixture-model-a", "gemm_bf16_sm90a", "none")]:
        m, o = metrics[key], ours[key]
        assert (o.compiled, o.correct, o.uses, o.fast_1) == (m.compile_rate, m.correct_rate, m.uses_rate, m.fast[1.0]), key
        assert o.geomean_speedup == pytest.approx(m.geomean_speedup) if m.geomean_speedup else o.geomean_speedup is None


def test_sample_filters_page_and_count(conn, ids):
    everything = browse.sample_page(conn, browse.SampleFilter())
    assert [r.id for r in everything.rows] == sorted((r.id for r in everything.rows), reverse=True)
    assert browse.sample_count(conn, browse.SampleFilter()) == len(everything.rows) == 11
    flt = browse.SampleFilter(model="fixture-model-a", task_id="gemm_bf16_sm90a", context_level="brief")
    assert {r.id for r in browse.sample_page(conn, flt).rows} == {ids.wrong_result, ids.turn2}
    assert browse.sample_count(conn, flt.with_(category="wrong_result")) == 1
    assert {r.id for r in browse.sample_page(conn, browse.SampleFilter(context_level="none")).rows} >= {ids.expert_vecadd, ids.syntax_sample}
    assert [r.id for r in browse.sample_page(conn, browse.SampleFilter(arch="sm_100a")).rows] == [ids.skipped]
    assert [r.id for r in browse.sample_page(conn, browse.SampleFilter(category="skipped")).rows] == [ids.skipped]
    page2 = browse.sample_page(conn, browse.SampleFilter(), offset=4, limit=4)
    assert [r.id for r in page2.rows] == [r.id for r in everything.rows[4:8]]
    labelled = browse.sample_page(conn, browse.SampleFilter(labelled_only=True)).rows
    assert [(r.id, r.label) for r in labelled] == [(ids.wrong_result, "wrong_result")]


def test_full_text_search_is_parameterized(conn, ids):
    hits = browse.sample_page(conn, browse.SampleFilter(text="Parsing error")).rows  # in the assembler log
    assert [r.id for r in hits] == [ids.syntax_sample]
    assert {r.id for r in browse.sample_page(conn, browse.SampleFilter(text="wgmma.mma_async")).rows} >= {ids.wgmma_ok}
    hostile = "x'; DROP TABLE samples; -- \" OR 1=1 NEAR("
    assert browse.sample_page(conn, browse.SampleFilter(text=hostile)).rows == []
    assert browse.sample_count(conn, browse.SampleFilter()) == 11


def test_detail_fixes_and_partners(conn, ids):
    d = browse.sample_detail(conn, ids.syntax_sample)
    assert d.latest.category == "syntax" and d.latest.evidence["line"] == 37
    assert browse.fix_partner(conn, ids.syntax_sample) == ids.expert_vecadd
    assert browse.fix_partner(conn, ids.turn2) == ids.wrong_result  # the turn it follows
    assert browse.fix_partner(conn, ids.wrong_result) == ids.turn2  # the turn that follows it
    assert browse.sample_detail(conn, 10_000) is None


def test_triage_pivot(conn):
    table = summary.triage(summary.cells(conn), "model")
    rows = {cat: (total, counts) for cat, note, total, counts in table.rows if not note}
    assert rows["slower_than_baseline"][0] == 2 and "ok" not in rows
    assert table.columns == ["fixture-model-a", "fixture-model-b", "mutation"]
    by_task = summary.triage(summary.cells(conn), "task", include_ok=True)
    assert "ok" in {r[0] for r in by_task.rows}


def test_compare_picks_each_models_best(conn, ids):
    best = {m.model: m for m in browse.compare(conn, "gemm_bf16_sm90a")}
    assert best["expert"].sample_id == ids.wgmma_ok
    assert best["fixture-model-b"].speedup == 0.64 and best["fixture-model-b"].samples == 2
    assert best["fixture-model-a"].sample_id == ids.turn2  # correct and fastest beats the failing turn


def test_plot_data(conn):
    data = summary.plot_data(conn, summary.cells(conn))
    assert sorted(data.speedups["fixture-model-b"]) == [0.58, 0.64]
    assert data.by_level["fixture-model-a"]["full"][1] == 1.0
    assert data.by_split["fixture-model-b"] == {"train": 1.0, "heldout": 1.0}


def test_the_summary_is_reused_only_while_the_store_is_unchanged(store, ids):
    from ptxbench.db.records import Evaluation
    from ptxbench.db.writes import add_evaluation
    from ptxbench.db.reader import StoreReader
    from ptxbench.tui import summary_cache
    from ptxbench.tui.app import Prefetch

    reader = StoreReader(store)
    assert summary_cache.cached(reader) is None
    first, saved = Prefetch(reader).take()
    assert not saved
    again, saved = Prefetch(reader).take()
    assert saved and again == first  # offered from the saved summary
    assert summary_cache.compute(reader) == again
    db = open_store(store)
    add_evaluation(db, Evaluation(sample_id=ids.syntax_sample, engine_version="t", status="judged", category="ok", source="test"))
    db.conn.close()
    assert summary_cache.cached(reader) is None  # a new evaluation: the saved summary no longer applies
    changed, saved = Prefetch(reader).take()
    assert not saved and "syntax" not in {c.category for c in changed[0] if c.model == "mutation"}
