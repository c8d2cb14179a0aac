"""JSONL import of responses and candidates made elsewhere: stored, linked, judged; bad files refused whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from llm_server import expert_reply, mutation_reply
from ptxbench.cli.main import app
from ptxbench.db.generation import run_samples
from ptxbench.db.queries import get_model, get_run, latest_evaluation
from ptxbench.db.seed import ensure_default_store
from ptxbench.models.importer import ImportFileError, import_file

SOLUTIONS = Path(__file__).resolve().parents[1] / "tasks" / "solutions"


@pytest.fixture
def store(tmp_path: Path):
    db = ensure_default_store(tmp_path / "store.sqlite")
    yield db
    db.conn.close()


def _write(path: Path, lines: list) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return path


def _counts(db) -> tuple[int, ...]:
    return tuple(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                 for t in ("models", "runs", "samples", "evaluations"))


def _good_file(folder: Path) -> Path:
    kernels = folder / "kernels"
    kernels.mkdir(parents=True)
    (kernels / "rms.ptx").write_text((SOLUTIONS / "rmsnorm_bf16_sm90a" / "kernel.ptx").read_text())
    (kernels / "rms.json").write_text((SOLUTIONS / "rmsnorm_bf16_sm90a" / "manifest.json").read_text())
    manifest = json.loads((SOLUTIONS / "vector_add_smoke" / "manifest.json").read_text())
    return _write(folder / "cluster-run.jsonl", [
        {"task": "gemm_bf16_sm90a", "model": "qwen-remote", "context": "brief", "run": "remote-1",
         "response": mutation_reply("gemm-wrong-target"), "tokens_in": 900, "tokens_out": 4000, "latency_s": 31.5},
        {"task": "gemm_bf16_sm90a", "model": "qwen-remote", "context": "brief", "run": "remote-1", "turn": 2,
         "response": expert_reply("gemm_bf16_sm90a"), "source": "vLLM 0.11 on node 7"},
        {"task": "vector_add_smoke", "model": "qwen-remote", "context": "brief", "run": "remote-1",
         "language": "ptx", "code": (SOLUTIONS / "vector_add_smoke" / "kernel.ptx").read_text(), "manifest": manifest},
        "",
        {"task": "rmsnorm_bf16_sm90a", "model": "other-model", "code_file": "kernels/rms.ptx",
         "manifest_file": "kernels/rms.json", "sample_index": 3},
        {"task": "attn_fwd_sm90a", "model": "other-model", "response": "No code, just thoughts."},
    ])


def test_import_stores_links_and_judges(tmp_path: Path, store) -> None:
    path = _good_file(tmp_path)
    report = import_file(store, path)
    assert (report.lines, report.imported, report.skipped, report.judged) == (5, 5, 0, 5)
    assert report.categories == {"arch_unsupported": 1, "ok": 3, "no_candidate": 1}
    assert get_model(store, "qwen-remote").kind == "import"
    remote = get_run(store, report.runs["qwen-remote / remote-1"])
    assert remote.context_level == "brief" and remote.source == f"import:{path}"
    default_run = get_run(store, report.runs[f"other-model / import:{path.name}"])
    assert default_run.context_level == "none"
    samples = {(s.task_id, s.turn): s for s in run_samples(store, remote.id)}
    first, second = samples[("gemm_bf16_sm90a", 1)], samples[("gemm_bf16_sm90a", 2)]
    assert second.parent_id == first.id and first.tokens_out == 4000 and first.latency_s == 31.5
    assert second.source == f"import:{path} (vLLM 0.11 on node 7)"
    assert first.response == mutation_reply("gemm-wrong-target") and first.language == "ptx"
    assert latest_evaluation(store, second.id).source == "ptxbench import"
    (rms, attn) = sorted(run_samples(store, default_run.id), key=lambda s: s.task_id, reverse=True)
    assert rms.sample_index == 3 and rms.manifest["launches"][0]["entry"] == "rmsnorm_bf16"
    assert attn.language == "none" and latest_evaluation(store, attn.id).category == "no_candidate"


def test_importing_again_skips_what_is_stored_and_judges_what_is_not(tmp_path: Path, store) -> None:
    path = _good_file(tmp_path)
    first = import_file(store, path, judge=False)
    assert first.imported == 5 and first.judged == 0
    before = _counts(store)
    second = import_file(store, path)
    assert (second.imported, second.skipped, second.judged) == (0, 5, 5)
    third = import_file(store, path)
    assert (third.imported, third.skipped, third.judged) == (0, 5, 0)
    assert _counts(store)[:3] == before[:3]


def test_a_bad_file_is_refused_whole_with_line_numbers(tmp_path: Path, store) -> None:
    outside = tmp_path / "outside.ptx"
    outside.write_text((SOLUTIONS / "vector_add_smoke" / "kernel.ptx").read_text())
    folder = tmp_path / "drop"
    folder.mkdir()
    os.symlink(outside, folder / "link.ptx")
    ok = {"task": "vector_add_smoke", "model": "m", "response": "```ptx\n.entry\n```"}
    path = _write(folder / "bad.jsonl", [
        ok,                                                                      # 1 fine
        "{not json",                                                             # 2
        {"task": "no_such_task", "model": "m", "response": "x"},                 # 3
        {"task": "vector_add_smoke", "response": "x"},                           # 4
        {"task": "vector_add_smoke", "model": "m", "response": "x", "code": "y", "language": "ptx"},  # 5
        {"task": "vector_add_smoke", "model": "m", "code_file": "../outside.ptx"},                 # 6
        {"task": "vector_add_smoke", "model": "m", "code_file": str(outside)},                     # 7
        {"task": "vector_add_smoke", "model": "m", "code_file": "link.ptx"},                       # 8
        {"task": "vector_add_smoke", "model": "m", "response": "x", "turn": 3, "sample_index": 1},  # 9
        ok,                                                                      # 10 duplicate of 1
        {"task": "vector_add_smoke", "model": "m", "response": "x", "temperature": 0.1, "sample_index": 5},  # 11 fine
        {"task": "vector_add_smoke", "model": "m", "code": "x", "language": "sass", "sample_index": 2},  # 12
        {"task": "vector_add_smoke", "model": "m", "response": "x", "context": "huge", "sample_index": 4},  # 13
    ])
    before = _counts(store)
    with pytest.raises(ImportFileError) as info:
        import_file(store, path)
    problems = "\n".join(info.value.problems)
    for number, words in [(2, "not JSON"), (3, "unknown task 'no_such_task'"), (4, "model: required"),
                          (5, "exactly one of response, code, code_file"), (6, "points outside"),
                          (7, "must be a path relative"), (8, "points outside"), (9, "has no turn 2"),
                          (10, "same model, run, task, sample_index and turn as line 1"),
                          (12, "language: give ptx or cuda"),
                          (13, "context: must be one of")]:
        assert f"line {number}: " in problems and words in problems, (number, words)
    assert "line 1:" not in problems and "line 11:" not in problems     # an extra field is kept, not a problem
    assert _counts(store) == before  # nothing written


def test_a_run_context_clash_writes_nothing(tmp_path: Path, store) -> None:
    line = {"task": "vector_add_smoke", "model": "m", "run": "r", "context": "full",
            "response": expert_reply("vector_add_smoke")}
    import_file(store, _write(tmp_path / "a.jsonl", [line]))
    before = _counts(store)
    clash = {**line, "context": "none", "sample_index": 1}
    with pytest.raises(ImportFileError, match="exists with context full"):
        import_file(store, _write(tmp_path / "b.jsonl", [{**line, "sample_index": 2, "task": "gemm_bf16_sm90a"}, clash]))
    assert _counts(store) == before


def test_cli_import(tmp_path: Path) -> None:
    db = tmp_path / "cli.sqlite"
    path = _good_file(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["import", str(path), "--db", str(db), "--create", "--gpu", "off"])
    assert result.exit_code == 0, result.output
    assert "5 imported, 0 already stored, 5 judged" in result.output
    bad = _write(tmp_path / "bad.jsonl", [{"task": "vector_add_smoke"}])
    result = runner.invoke(app, ["import", str(bad), "--db", str(db), "--gpu", "off"])
    assert result.exit_code == 2 and "line 1: model: required" in result.output
    result = runner.invoke(app, ["import", str(path), "--db", str(db), "--gpu", "off", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["skipped"] == 5


# -- forgiving where it should be: extra fields kept, every skipped line said, changed code never kept silently


def _vector_line(**extra) -> dict:
    code = (SOLUTIONS / "vector_add_smoke" / "kernel.ptx").read_text()
    manifest = json.loads((SOLUTIONS / "vector_add_smoke" / "manifest.json").read_text())
    return {"task": "vector_add_smoke", "model": "m", "run": "r", "language": "ptx", "code": code,
            "manifest": manifest, **extra}


def test_extra_fields_are_kept_as_metadata_in_the_runs_params(tmp_path: Path, store) -> None:
    path = _write(tmp_path / "extra.jsonl", [
        _vector_line(temperature=0.6, top_p=0.95, trial={"seed": 7, "host": "node-3"}),
        _vector_line(sample_index=1),
    ])
    report = import_file(store, path, judge=False)
    assert (report.imported, report.metadata_kept) == (2, 1)
    run = get_run(store, report.runs["m / r"])
    first, second = sorted(run_samples(store, run.id), key=lambda s: s.sample_index)
    assert run.params["metadata"] == {str(first.id): {"temperature": 0.6, "top_p": 0.95,
                                                      "trial": {"seed": 7, "host": "node-3"}}}
    huge = _write(tmp_path / "huge.jsonl", [_vector_line(sample_index=2, blob="x" * 70_000)])
    import_file(store, huge, judge=False)
    kept = get_run(store, run.id).params["metadata"]
    assert len(kept) == 2 and {"_not_kept": ["blob"], "_why": "over 65536 bytes as JSON"} in kept.values()


def test_every_skipped_line_is_listed_with_its_reason(tmp_path: Path, store) -> None:
    path = _good_file(tmp_path)
    import_file(store, path, judge=False)
    again = import_file(store, path, judge=False)
    assert again.already_stored == again.skipped == 5
    assert [s["where"] for s in again.skipped_lines] == ["line 1", "line 2", "line 3", "line 5", "line 6"]
    assert all(s["kind"] == "stored" and s["reason"].startswith("already stored (sample ") for s in again.skipped_lines)
    bad = _write(tmp_path / "mixed.jsonl", [
        {"task": "vector_add_smoke", "model": "m", "response": "x", "sample_index": 9},
        {"task": "no_such_task", "model": "m", "response": "x"},
        "{not json",
        {"task": "vector_add_smoke", "model": "m", "response": "y", "sample_index": 9, "turn": 3},
    ])
    with pytest.raises(ImportFileError):
        import_file(store, bad, judge=False)                    # refused whole by default
    report = import_file(store, bad, judge=False, skip_bad=True)
    assert report.imported == 1
    assert {(s["where"], s["kind"]) for s in report.skipped_lines} == {("line 2", "bad"), ("line 3", "bad"),
                                                                     ("line 4", "bad")}
    runner = CliRunner()
    db = tmp_path / "cli.sqlite"
    assert runner.invoke(app, ["import", str(path), "--db", str(db), "--create", "--no-judge"]).exit_code == 0
    done = runner.invoke(app, ["import", str(path), "--db", str(db), "--no-judge"])
    assert done.exit_code == 0 and "already stored (the same code): lines 1-3, 5-6" in done.output
    done = runner.invoke(app, ["import", str(bad), "--db", str(db), "--no-judge", "--skip-bad"])
    assert done.exit_code == 0, done.output
    assert "line 2: task: unknown task 'no_such_task'" in done.output and "line 3: not JSON" in done.output
    assert "line 4: turn 3 has no turn 2" in done.output


def test_changed_code_for_a_stored_slot_is_a_conflict_or_a_new_attempt(tmp_path: Path, store) -> None:
    first = _write(tmp_path / "first.jsonl", [
        {"task": "vector_add_smoke", "model": "m", "run": "r", "response": "turn one"},
        {"task": "vector_add_smoke", "model": "m", "run": "r", "response": "turn two", "turn": 2},
        {"task": "vector_add_smoke", "model": "m", "run": "r", "response": "turn three", "turn": 3},
        {"task": "vector_add_smoke", "model": "m", "run": "r", "response": "other", "sample_index": 1},
    ])
    stored = import_file(store, first, judge=False)
    run_id = stored.runs["m / r"]
    before = {(s.sample_index, s.turn): s.response for s in run_samples(store, run_id)}
    changed = _write(tmp_path / "changed.jsonl", [
        {"task": "vector_add_smoke", "model": "m", "run": "r", "response": "turn one"},
        {"task": "vector_add_smoke", "model": "m", "run": "r", "response": "turn two, rewritten", "turn": 2},
        {"task": "vector_add_smoke", "model": "m", "run": "r", "response": "turn three", "turn": 3},
        {"task": "vector_add_smoke", "model": "m", "run": "r", "response": "other", "sample_index": 1},
    ])
    report = import_file(store, changed, judge=False)
    assert report.imported == 0
    assert [(s["where"], s["kind"]) for s in report.skipped_lines] == [
        ("line 1", "stored"), ("line 2", "conflict"), ("line 3", "follows"), ("line 4", "stored")]
    assert report.conflicts == [{"where": "line 2", "stored_sample": report.conflicts[0]["stored_sample"],
                                 "resolved": "not imported"}]
    assert {(s.sample_index, s.turn): s.response for s in run_samples(store, run_id)} == before
    runner = CliRunner()
    done = runner.invoke(app, ["import", str(changed), "--db", str(tmp_path / "store.sqlite"), "--no-judge"])
    assert done.exit_code == 1 and "line 2: conflict: vector_add_smoke sample 0 turn 2" in done.output
    assert "line 3: follows a conflicting turn (line 2)" in done.output
    report = import_file(store, changed, judge=False, on_change="new-attempt")
    assert (report.imported, report.new_attempts, report.already_stored) == (3, 1, 1)
    assert report.conflicts[0]["resolved"] == "new attempt" and report.conflicts[0]["sample_index"] == 2
    after = {(s.sample_index, s.turn): s for s in run_samples(store, run_id)}
    assert {k: v.response for k, v in after.items() if k[0] < 2} == before       # the old attempt stays whole
    assert [after[(2, t)].response for t in (1, 2, 3)] == ["turn one", "turn two, rewritten", "turn three"]
    assert after[(2, 2)].parent_id == after[(2, 1)].id and after[(2, 3)].parent_id == after[(2, 2)].id
    again = import_file(store, changed, judge=False, on_change="new-attempt")
    assert (again.imported, again.new_attempts, again.already_stored) == (0, 0, 4)   # found as the attempt it was
