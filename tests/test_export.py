"""`services/export.py`: the seeded store's samples and an agent episode out as JSON Lines and Parquet,
every verdict field with them, never over a store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ptxbench.db.files import UnsafeOutput
from ptxbench.db.seed import seed_store
from ptxbench.db.store import open_store
from ptxbench.db.trajectories import Episode, Step, add_step, start_episode
from ptxbench.db.writes import get_or_create_model
from ptxbench.services.export import ExportFailed, export


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("export") / "store.sqlite"
    db = open_store(path)
    seed_store(db)
    model = get_or_create_model(db, "loopback", source="test")
    run_id = db["runs"].insert({"model_id": model.id, "name": "agent", "source": "test",
                                "started_at": "2026-12-03T00:00:00Z", "params": "{}"}).last_pk
    episode = start_episode(db, Episode(run_id=run_id, task_id="vector_add_smoke", agent="ptxbench run --agent",
                                        status="running", source="test", started_at="2026-12-03T00:00:00Z"))
    add_step(db, Step(episode_id=episode.id, step=1, kind="tool", tool="check", arguments='{"code": "x"}',
                      result={"category": "syntax"}, status="ok"))
    db.conn.close()
    return path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_sample_comes_out_with_its_evaluations_measurements_and_seeds(store, tmp_path):
    out = tmp_path / "samples.jsonl"
    done = export(store, "samples", out)
    records = _lines(out)
    db = open_store(store)
    assert done.records == len(records) == db.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    evaluations = db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    measurements = db.execute("SELECT COUNT(*) FROM measurements").fetchone()[0]
    assert sum(len(r["evaluations"]) for r in records) == evaluations
    assert sum(len(e["measurements"]) for r in records for e in r["evaluations"]) == measurements
    assert {r["schema"] for r in records} == {"ptxbench.sample/1"}
    gemm = next(r for r in records if r["source"] == "expert" and r["task_id"] == "gemm_bf16_sm90a")
    judged = gemm["evaluations"][-1]
    assert judged["engine_version"] and judged["device"] and judged["evidence"]["seeds"]
    assert {m["split"] for m in judged["measurements"]} == {"train", "heldout"}
    assert "ptx" not in judged and "sass" not in judged            # the texts only when asked for
    with_texts = tmp_path / "texts.jsonl"
    export(store, "samples", with_texts, texts=True)
    assert any(e.get("assembler_log") for r in _lines(with_texts) for e in r["evaluations"])


def test_episodes_come_out_with_their_steps(store, tmp_path):
    out = tmp_path / "episodes.jsonl"
    assert export(store, "trajectories", out).records == 1
    (episode,) = _lines(out)
    assert episode["schema"] == "ptxbench.trajectory/1" and episode["model"] == "loopback"
    assert [s["tool"] for s in episode["steps"]] == ["check"] and episode["steps"][0]["result"] == {"category": "syntax"}


def test_parquet_holds_the_same_records(store, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "samples.parquet"
    done = export(store, "samples", out)
    table = pq.read_table(out)
    assert done.format == "parquet" and table.num_rows == done.records
    first = table.slice(0, 1).to_pylist()[0]
    assert first["schema"] == "ptxbench.sample/1" and isinstance(json.loads(first["evaluations"]), list)


def test_an_export_never_writes_over_a_store_and_says_what_it_cannot_do(store, tmp_path):
    before = store.read_bytes()
    with pytest.raises(UnsafeOutput):
        export(store, "samples", store)
    assert store.read_bytes() == before
    with pytest.raises(ExportFailed, match="known: samples, trajectories"):
        export(store, "runs", tmp_path / "x.jsonl")
    with pytest.raises(ExportFailed, match="no store"):
        export(tmp_path / "missing.sqlite", "samples", tmp_path / "x.jsonl")


def test_the_command_writes_and_refuses_as_the_service_does(store, tmp_path):
    from typer.testing import CliRunner

    from ptxbench.cli.main import app

    out = tmp_path / "s.jsonl"
    result = CliRunner().invoke(app, ["export", "samples", "--db", str(store), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    said = json.loads(result.stdout)
    assert said["records"] == len(_lines(out)) and said["records_schema"] == "ptxbench.sample/1"
    refused = CliRunner().invoke(app, ["export", "samples", "--db", str(store), "--out", str(store)])
    assert refused.exit_code == 2 and "nothing was written" in refused.output
