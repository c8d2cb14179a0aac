"""What the `ptxbench` command writes is inert: a candidate, a model's reply and ptxas's messages
(which quote the candidate's lines) can carry terminal control sequences and rich markup.

The real commands run as a person runs them, in a process whose output is captured as bytes, with
colour forced on as in a terminal (FORCE_COLOR): every escape sequence left in the output is
rich's own colour (SGR), and what was planted is shown written out (engine/inert.py). JSON stays
valid and keeps the text whole, escaped by `json.dumps`.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ptxbench.db.records import Evaluation, Measurement, Run, Sample
from ptxbench.db.seed import ensure_default_store
from ptxbench.db.writes import add_evaluation, add_sample, create_run, get_or_create_model

DATA = Path(__file__).parent / "tui" / "data"
GEMM = "gemm_bf16_sm90a"

# ASCII only, so that ptxas reads the line and quotes it in its message.
ASCII_HOSTILE = ("\x1b]52;c;cm0gLXJmIH4K\x07\x1b]0;pwned-title\x07\x1b]2;two\x1b\\\x1b[2J\x1b[H\x1b[5A\x1b[20C"
                 "\x1b[32mok\x1b[0m looks fine\roverwritten safe\x08\x08\x08\x08evil\x7f [green]ok[/] "
                 "[link=file:///etc/passwd]x[/link]")
# What ptxas refuses to read (non-ASCII), shown by the engine all the same.
WIDE_HOSTILE = "\x9b2J \u202eexe.txt\u202c \u2066iso\u2069 pay\u200bpal"
HOSTILE = ASCII_HOSTILE + " " + WIDE_HOSTILE
SGR = re.compile(rb"\x1b\[[0-9;]*m")  # rich's colour: the one escape sequence it writes here
NOT_TEXT = [b"\x07", b"\x08", b"\r", b"\x7f", "\x9b".encode(), "\u202e".encode(), "\u202c".encode(),
            "\u2066".encode(), "\u2069".encode(), "\u200b".encode(), b"\x1b]8;"]


def ptxbench(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[bytes], bytes]:
    run = subprocess.run([sys.executable, "-m", "ptxbench.cli.main", *args], capture_output=True, env=env,
                         timeout=300)
    return run, run.stdout + run.stderr


def assert_inert(data: bytes, where: str) -> None:
    """No escape sequence but rich's colour, no control or bidi character, no hyperlink."""
    left = SGR.sub(b"", data)
    at = left.find(b"\x1b")
    assert at < 0, f"{where}: {left[max(0, at - 40):at + 40]!r}"
    for raw in NOT_TEXT:
        assert raw not in data, f"{where}: {raw!r} reached the terminal"


def visible(data: bytes) -> str:
    """The text a person reads: colour taken out, the lines and the panel's borders joined."""
    text = SGR.sub(b"", data).decode()
    return re.sub(r"[\s│╭╮╰╯─]+", "", text)


def shown(needle: str, data: bytes) -> bool:
    return re.sub(r"\s+", "", needle) in visible(data)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    cache = tmp_path_factory.mktemp("cache")
    return {**os.environ, "PTXBENCH_CACHE": str(cache), "COLUMNS": "100", "FORCE_COLOR": "1", "TERM": "xterm-256color"}


@pytest.fixture(scope="module")
def candidates(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("hostile-candidates")
    lines = (DATA / "vecadd.ptx").read_text().split("\n")
    at = next(i for i, line in enumerate(lines) if "add.f32" in line or "add.rn.f32" in line)
    ascii_ptx = "\n".join([*lines[:at], f"\tbogus_{ASCII_HOSTILE};", *lines[at:]])
    wide_ptx = "\n".join([*lines[:at], f"\tbogus {WIDE_HOSTILE};", *lines[at:]])
    reply = (f"Here is the kernel. {HOSTILE}\n\n```ptx\n{ascii_ptx}\n```\n\nAnd a second try:\n\n"
             f"```ptx\n// {HOSTILE}\n.version 8.0\n```\n")
    out = {"ascii": folder / "ascii.ptx", "wide": folder / "wide.ptx", "reply": folder / "reply.md"}
    out["ascii"].write_text(ascii_ptx)
    out["wide"].write_text(wide_ptx)
    out["reply"].write_text(reply)
    return out


def test_check_shows_ptxas_quoting_the_candidate_inert(env, candidates):
    run, data = ptxbench(env, "check", str(candidates["ascii"]), "--static", "--no-cache")
    assert run.returncode == 0, data
    assert b"\x1b[" in data  # colour was on: rich wrote its own sequences
    assert_inert(data, "check")
    assert shown("Parsing error near '\\x1b'", data)  # ptxas's message
    assert shown("bogus_\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b]0;pwned-title\\x07\\x1b]2;two\\x1b\\", data)  # its line


def test_check_shows_what_ptxas_refused_inert(env, candidates):
    run, data = ptxbench(env, "check", str(candidates["wide"]), "--static", "--no-cache")
    assert run.returncode == 0, data
    assert_inert(data, "check (non-ASCII)")
    assert shown("\\x9b2J \\u202eexe.txt\\u202c \\u2066iso\\u2069 pay\\u200bpal", data)


def test_check_of_a_model_reply_shows_it_inert_and_its_markup_as_written(env, candidates):
    run, data = ptxbench(env, "check", str(candidates["reply"]), "--static", "--no-cache")
    assert run.returncode == 0, data
    assert_inert(data, "check (reply)")
    assert b"\x1b]" not in data and b"pwned-title\x07" not in data


def strings_in(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings_in(v)]
    return []


def test_check_json_is_valid_and_escapes_every_control(env, candidates):
    for name in ("ascii", "wide", "reply"):
        run, _ = ptxbench(env, "check", str(candidates[name]), "--static", "--no-cache", "--json")
        assert run.returncode == 0, run.stderr
        out = run.stdout
        assert b"\x1b" not in out and all(raw not in out for raw in NOT_TEXT), name
        payload = json.loads(out)  # valid, and the text is whole once decoded
        text = "\n".join(strings_in(payload))
        assert "\x1b" in text or "\u202e" in text, name
    assert "\\u001b" in run.stdout.decode() or "\\u202e" in run.stdout.decode()


def test_an_error_line_quoting_the_input_is_inert(env, candidates):
    run, data = ptxbench(env, "check", str(candidates["ascii"]), "--static", "--task", "nope" + ASCII_HOSTILE)
    assert run.returncode == 2 and b"error:" in run.stderr
    assert_inert(data, "the error line")
    assert shown("nope\\x1b]52;c;", data) and shown("[green]ok[/]", data)


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hostile-report") / "store.sqlite"
    db = ensure_default_store(path)
    model = get_or_create_model(db, "model " + HOSTILE, source="test")
    run = create_run(db, Run(model_id=model.id, name="run " + HOSTILE, context_level="brief", source="test")).id
    for i, category in enumerate(("ok", "syntax")):
        sid = add_sample(db, Sample(task_id=GEMM, language="ptx", source="import:" + HOSTILE, code=f"// {HOSTILE} {i}",
                                    run_id=run, sample_index=i)).id
        add_evaluation(db, Evaluation(sample_id=sid, engine_version="t", status="judged", category=category,
                                      source=HOSTILE, compiled=category == "ok", correct=category == "ok",
                                      correct_heldout=category == "ok", uses_ptx=True, uses_sass=True,
                                      speedup=1.5 if category == "ok" else None),
                       [Measurement(split="heldout", sizes={"M": 1}, category=category, worst={"at": HOSTILE})])
    db.conn.close()
    return path


def test_report_shows_a_model_name_inert(env, hostile_store):
    run, data = ptxbench({**env, "COLUMNS": "400"}, "report", "--db", str(hostile_store), "--by", "model")
    assert run.returncode == 0, data
    assert_inert(data, "report")
    assert shown("model \\x1b]52;c;cm0gLXJmIH4K\\x07", data)
    run, data = ptxbench({**env, "COLUMNS": "400"}, "report", "--db", str(hostile_store), "--headline")
    assert run.returncode == 0, data
    assert_inert(data, "report --headline")


def test_report_csv_markdown_and_json_on_standard_output_are_inert(env, hostile_store, tmp_path):
    for args in (("--csv", "-"), ("--json", "-"), ("--headline", "--markdown", "-")):
        run, data = ptxbench(env, "report", "--db", str(hostile_store), "--by", "model", *args)
        assert run.returncode == 0, data
        assert_inert(data, " ".join(args))
    run, _ = ptxbench(env, "report", "--db", str(hostile_store), "--by", "model", "--json", "-")
    assert json.loads(run.stdout)[0]["model"] == "model " + HOSTILE  # JSON keeps the name whole
    # A file keeps the text as it is: it is data, not the terminal.
    target = tmp_path / "rows.csv"
    run, _ = ptxbench(env, "report", "--db", str(hostile_store), "--by", "model", "--csv", str(target))
    assert "model " + HOSTILE in target.read_bytes().decode()


def _terminal() -> tuple[object, io.StringIO]:
    from ptxbench.cli.terminal import console

    buffer = io.StringIO()
    return console(file=buffer, force_terminal=True, color_system="truecolor", width=100), buffer


def test_eval_progress_shows_worker_and_engine_messages_inert(monkeypatch):
    from ptxbench.cli import terminal
    from ptxbench.cli.eval import RichProgress
    from ptxbench.services import progress as ev

    con, buffer = _terminal()
    monkeypatch.setattr(terminal, "console", lambda **_: con)
    sink = RichProgress()
    events = [ev.Start(total=1, device=HOSTILE, static_only=False),
              ev.WorkerChanged(worker="w" + HOSTILE, state="ready", device=HOSTILE),
              ev.WorkerChanged(worker="w" + HOSTILE, state="lost", message=HOSTILE),
              ev.SampleStarted(sample_id=1, task_id=HOSTILE, index=0),
              ev.StageChanged(sample_id=1, stage=HOSTILE, status="begin"),
              ev.Log(level="warning", message=HOSTILE),
              ev.Error(sample_id=1, message=HOSTILE),
              ev.Result(sample_id=1, evaluation_id=1, category=HOSTILE, status="judged", speedup=None, time_ms=None),
              ev.Done(judged=1, failed_tool=0, cancelled=False)]
    for event in events:
        sink.emit(event)
    sink.close()
    data = buffer.getvalue().encode()
    # The progress bar moves the cursor itself (CR, CSI n A, erase line); what was planted must not.
    planted = [b"\x1b]", b"\x1b[2J", b"\x1b[32mok", b"\x1b[5A\x1b[20C", b"looks fine\roverwritten"]
    for sequence in planted + [raw for raw in NOT_TEXT if raw != b"\r"]:
        assert sequence not in data, sequence
    assert shown("error (sample 1): \\x1b]52;c;", data) and shown("[green]ok[/]", data)


def test_run_events_and_error_lines_are_inert(capsys):
    from ptxbench.cli.conventions import say_error
    from ptxbench.cli.run import _printer

    con, buffer = _terminal()
    show = _printer(con)
    show({"event": "start", "resumed": False, "run_id": 1, "run_name": HOSTILE, "trajectories": 1})
    show({"event": "turn", "task": HOSTILE, "index": 0, "turn": 1, "category": HOSTILE, "sample_id": 1,
          "status": HOSTILE})
    show({"event": "failure", "task": HOSTILE, "index": 0, "turn": 1, "kind": "request", "message": HOSTILE})
    show({"event": "log", "level": "error", "message": HOSTILE})
    assert_inert(buffer.getvalue().encode(), "run events")
    assert "[green]ok[/]" in buffer.getvalue() and "\\x1b]0;pwned-title" in buffer.getvalue()
    say_error("run", f"the endpoint refused the run: {HOSTILE}")
    err = capsys.readouterr().err
    assert_inert(err.encode(), "say_error")
    assert "\\x1b]52;c;" in err and "[link=file:///etc/passwd]x[/link]" in err
