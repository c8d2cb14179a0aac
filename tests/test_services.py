"""The service layer's typed boundaries: categories, progress events, arch names, CLI conventions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ptxbench.engine.arch import arch_of, arch_of_capability
from ptxbench.engine.categories import BY_STAGE, CATEGORIES, OK, TOOL_ERROR, Category
from ptxbench.services import progress as ev


def test_categories_are_a_str_enum_whose_values_are_the_stored_words():
    assert OK == "ok" and isinstance(OK, str) and Category("wrong_result") is Category.WRONG_RESULT
    assert set(Category) == set(CATEGORIES) | {OK, TOOL_ERROR}
    # The words the store keeps, by stage, in priority order: changing one would orphan stored rows.
    assert {stage: [str(c) for c in cats] for stage, cats in BY_STAGE.items()}["verify"] == [
        "out_of_bounds_write",
        "input_modified",
        "unwritten_output",
        "nan_inf",
        "wrong_result",
    ]
    assert json.dumps({"category": Category.NO_BASELINE}) == '{"category": "no_baseline"}'
    assert f"{Category.SYNTAX}" == "syntax" and {"syntax": 1}[Category.SYNTAX] == 1


def test_a_category_member_is_stored_as_its_word(tmp_path):
    import sqlite3

    conn = sqlite3.connect(tmp_path / "x.sqlite")
    conn.execute("CREATE TABLE t (c TEXT)")
    conn.execute("INSERT INTO t VALUES (?)", (Category.HANG_TIMEOUT,))
    assert conn.execute("SELECT c, typeof(c) FROM t").fetchone() == ("hang_timeout", "text")


@pytest.mark.parametrize(
    "event, wire",
    [
        (
            ev.Start(total=3, device=None, static_only=True),
            {"event": "start", "t": 1.5, "total": 3, "device": None, "static_only": True},
        ),
        (
            ev.StageChanged(sample_id=4, stage="assemble", status="begin"),
            {"event": "stage", "t": 1.5, "sample_id": 4, "stage": "assemble", "status": "begin"},
        ),
        (
            ev.StageChanged(sample_id=4, stage="inspect", status="end", category="syntax"),
            {"event": "stage", "t": 1.5, "sample_id": 4, "stage": "inspect", "status": "end", "category": "syntax"},
        ),
        (
            ev.Error(sample_id=None, message="the GPU worker cannot start"),
            {"event": "error", "t": 1.5, "sample_id": None, "message": "the GPU worker cannot start"},
        ),
        (
            ev.Error(sample_id=2, message="x", evaluation_id=9),
            {"event": "error", "t": 1.5, "sample_id": 2, "message": "x", "evaluation_id": 9},
        ),
        (
            ev.Result(sample_id=2, evaluation_id=9, category="ok", status="judged", speedup=None, time_ms=0.5),
            {
                "event": "result",
                "t": 1.5,
                "sample_id": 2,
                "evaluation_id": 9,
                "category": "ok",
                "status": "judged",
                "speedup": None,
                "time_ms": 0.5,
            },
        ),
        (
            ev.Done(judged=1, failed_tool=0, cancelled=False),
            {"event": "done", "t": 1.5, "judged": 1, "failed_tool": 0, "cancelled": False},
        ),
    ],
)
def test_progress_events_keep_the_documented_wire_format(event, wire):
    """docs/eval-progress.md: field names and order, optional fields left off when None."""
    assert ev.to_wire(event, 1.5) == wire and list(ev.to_wire(event, 1.5)) == list(wire)
    assert ev.parse_line(ev.dumps(event, 1.5)) == event


def test_lines_that_are_not_events_and_kinds_not_known():
    assert ev.parse_line("not json") is None and ev.parse_line("[1, 2]") is None and ev.parse_line('{"a": 1}') is None
    assert ev.parse_line('{"event": "newer", "x": 1}') == ev.Unknown({"event": "newer", "x": 1})
    assert ev.parse_line('{"event": "sample"}') == ev.SampleStarted(sample_id=0, task_id="", index=0)


def test_one_rule_names_the_arch_of_a_compute_capability():
    assert [arch_of(9, 0), arch_of(10, 0), arch_of(10, 3), arch_of(12, 1)] == [
        "sm_90a",
        "sm_100a",
        "sm_103a",
        "sm_121a",
    ]
    assert arch_of(8, 0) == "sm_80"  # no arch-specific target before Hopper
    assert arch_of_capability("9.0") == "sm_90a" and arch_of_capability("10.1") == "sm_101a"
    from ptxbench.engine.gpu import protocol

    assert protocol.arch_of is arch_of  # the worker names its device with the same rule


def _ptxbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ptxbench.cli.main", *args], capture_output=True, text=True, timeout=120
    )


def test_every_command_says_an_error_the_same_way(tmp_path):
    missing = tmp_path / "none.sqlite"
    for args, command in [
        (("eval",), "eval"),
        (("check", str(tmp_path / "no.ptx")), "check"),
        (("report", "--db", str(missing)), "report"),
        (("fixit", "pairs", "--db", str(tmp_path)), "fixit pairs"),
    ]:
        proc = _ptxbench(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.startswith(f"ptxbench {command}: error: "), (args, proc.stderr)
        assert "Traceback" not in proc.stderr


def test_the_explorer_is_a_subcommand_too():
    proc = _ptxbench("tui", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: ptxbench tui") and "--serve" in proc.stdout


def test_exit_codes_are_one_enum():
    from ptxbench.cli.conventions import ExitCode

    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4]
