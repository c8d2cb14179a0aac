"""`ptxbench fixit` as real processes over real stores: pairs → explain → export, and repairs
and explanations by a model behind a real chat-completions server on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixit_data import add_mutant, trajectory_store
from llm_server import LoopbackLLM, reply_text

from ptxbench.db.fixit import fixit_stats, stored_pairs
from ptxbench.db.queries import evaluations_for, get_sample
from ptxbench.db.store import open_store
from ptxbench.fixit.export import read_jsonl
from ptxbench.tasks.mutations import apply, load_mutations

ROOT = Path(__file__).resolve().parents[1]
EXPERT_VADD = (ROOT / "tasks" / "solutions" / "vector_add_smoke" / "kernel.ptx").read_text()
HELD_OUT_N = str((1 << 24) + 3)


def fixit(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ptxbench.cli.main", "fixit", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONWARNINGS": "ignore"})


@pytest.fixture
def store(tmp_path) -> Path:
    built = trajectory_store(tmp_path)
    db = open_store(built.path)
    add_mutant(db, "add-vector-bound-off-by-one", heldout_only=True)
    add_mutant(db, "add-version-from-the-future")
    add_mutant(db, "add-wrong-target")
    db.conn.close()
    return built.path


def test_pairs_explain_export_stats(store, tmp_path):
    proc = fixit("pairs", "--db", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert found["stored"] == 2 and found["unverified"] == 1 and found["already_stored"] == 3
    assert found["unverified_pairs"][0]["task"] == "rmsnorm_bf16_sm90a"
    again = json.loads(fixit("pairs", "--db", str(store), "--json").stdout)
    assert again["stored"] == 0 and again["already_stored"] == 5

    proc = fixit("explain", "--db", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["derived"] == 3  # the three mutation pairs had only their written explanation

    out = tmp_path / "set.jsonl"
    proc = fixit("export", str(out), "--parquet", str(tmp_path / "set.parquet"), "--db", str(store),
                 "--val-fraction", "0.25", "--json")
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["all"]["pairs"] == 5 and stats["heldout"]["pairs"] == 1
    assert stats["dropped"] == {}
    examples = read_jsonl(out)
    assert {e.split for e in examples} == {"train", "val", "heldout"}
    # a model run's own feedback words are the judgement of train examples
    train = [e for e in examples if e.split != "heldout"]
    assert all(e.messages[3]["content"].startswith(("Your kernel was judged", "Your reply was judged")) for e in train)
    assert all(HELD_OUT_N not in json.dumps(e.messages) for e in train)
    assert (tmp_path / "set.stats.json").is_file() and (tmp_path / "set.parquet").is_file()

    # a pair whose fix passed statically only is stored when asked, and exported only when asked
    assert json.loads(fixit("pairs", "--db", str(store), "--allow-static", "--json").stdout)["stored"] == 1
    stats = json.loads(fixit("export", str(out), "--db", str(store), "--json").stdout)
    assert stats["all"]["pairs"] == 5 and stats["dropped"] == {"unverified": 1}
    summary = json.loads(fixit("stats", "--db", str(store), "--json").stdout)
    assert summary["pairs"] == 6 and summary["verified"] == 5
    assert summary["last_export"]["path"] == str(out) and summary["last_export"]["heldout"]["pairs"] == 1

    proc = fixit("export", str(out), "--db", str(store), "--allow-static", "--json")
    assert json.loads(proc.stdout)["all"]["pairs"] == 6


def test_usage_mistakes_are_exit_2(store, tmp_path):
    assert fixit("pairs", "--db", str(store), "--task", "no_such_task").returncode == 2
    assert fixit("pairs", "--db", str(store), "--kind", "mutation").returncode == 2
    assert fixit("explain", "--db", str(store), "--model", "x").returncode == 2
    proc = fixit("export", str(tmp_path / "nowhere" / "set.jsonl"), "--db", str(store))
    assert proc.returncode == 2 and "not a folder" in proc.stderr
    proc = fixit("train", "--data", str(tmp_path / "missing.jsonl"), "--model-dir", str(tmp_path), "--out", str(tmp_path / "a"))
    assert proc.returncode == 2 and "no such file" in proc.stderr


def _mutant_reply(mid: str, prose: str) -> str:
    m = next(m for m in load_mutations() if m.id == mid)
    v = apply(m)
    return reply_text(v.code, v.manifest, prose=prose)


def test_repair_by_a_model_over_two_turns(store, tmp_path):
    explanation = ("The fourth lane subtracted instead of adding; the fix computes add.f32 in every lane, and the "
                   "unwritten outputs come from the dropped vector store.")
    recording = {"replies": {
        # turn 2 = the task prompt and the failed kernel's judgement: a first repair that does not assemble
        "vector_add_smoke": {"2": [{"content": _mutant_reply("add-missing-semicolon", "A first try.")}],
                             # turn 3 = told that it did not assemble: the right kernel
                             "3": [{"content": reply_text(EXPERT_VADD, None, prose=explanation)}]},
    }}
    with LoopbackLLM(recording, tmp_path / "llm") as llm:
        proc = fixit("repair", "--db", str(store), "--model", "loop", "--base-url", llm.base_url, "--task",
                     "vector_add_smoke", "--static", "--allow-static", "--turns", "2", "--include-fixed", "--json")
        requests = llm.requests()
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    done = events[-1]
    # the failures of vector_add: two of the model's, two mutants (the held-out-only one is no train failure)
    assert done["attempted"] == 4 and done["repaired"] == 4 and done["requests"] == 8
    assert done["categories"] == {"syntax": 4, "ok": 4}
    # the second request of a repair carries the first repair's judgement
    second = [r for r in requests if r["turn"] == 3]
    assert len(second) == 4 and all("syntax" in r["messages"][-1]["content"] for r in second)
    assert all(r["messages"][2]["role"] == "assistant" and "```ptx" in r["messages"][2]["content"] for r in second)

    db = open_store(store)
    repairs = [p for p in stored_pairs(db) if p.kind == "repair"]
    assert len(repairs) == 4
    for p in repairs:
        fixed = get_sample(db, p.fixed.id)
        assert fixed.turn == 2 and fixed.parent_id is not None and fixed.response.startswith("The fourth lane")
        assert fixed.source == f"fixit repair of sample {p.failed.id} by model:loop"
        assert evaluations_for(db, fixed.id)[0].source == "ptxbench fixit repair"
        assert p.explanation_source == "model:loop (repair reply)" and p.explanation.startswith("The fourth lane")
        assert p.verification == "static"  # judged without a GPU: counts only with --allow-static
    assert fixit_stats(db)["per_kind"].get("repair") is None  # not verified on a GPU: not counted


def test_explain_by_a_model(store, tmp_path):
    assert fixit("pairs", "--db", str(store)).returncode == 0
    text = "The vector path stored nothing: restoring st.global.v4.f32 writes the four sums of each thread."
    recording = {"replies": {"*": {"1": [{"content": f"<think>let me see</think>{text}\n```ptx\nnot kept\n```"}]}}}
    with LoopbackLLM(recording, tmp_path / "llm") as llm:
        proc = fixit("explain", "--db", str(store), "--model", "loop", "--base-url", llm.base_url, "--json")
        requests = llm.requests()
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["written"] == 5 and report["asked"] == 5
        first = requests[0]["messages"][1]["content"]
        assert first.startswith("# Task `") and "```diff" in first and "judgement" in first
        # explained pairs are not asked again
        again = json.loads(fixit("explain", "--db", str(store), "--model", "loop", "--base-url", llm.base_url,
                                 "--json").stdout)
        assert again["asked"] == 0
    db = open_store(store)
    pairs = stored_pairs(db)
    explained = [p for p in pairs if p.explanation_source == "model:loop"]
    assert len(explained) == 5 and all(p.explanation == text for p in explained)
