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
        {"task": "vector_add_smoke", "model": "m", "response": "x", "temperature": 0.1},           # 11
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
                          (11, "unknown field(s): temperature"), (12, "language: give ptx or cuda"),
                          (13, "context: must be one of")]:
        assert f"line {number}: " in problems and words in problems, (number, words)
    assert "line 1:" not in problems
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
