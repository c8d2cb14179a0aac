"""Nothing PTXBench writes or reads beside the store harms it: `report`, Fixit's export and the
explorer's Export refuse a path that is the store (or a link to it, or its -wal, -shm or
-journal, or any SQLite file) and write whole files or none; a command that adds data refuses
a `--db` that is not a store unless `--create`; an import never opens a store a line names."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from store_faults import CHILD_WRITES, small_store
from typer.testing import CliRunner

from ptxbench.cli.main import app
from ptxbench.db.access import StoreError
from ptxbench.db.files import UnsafeOutput, atomic_output, check_output, database_reason, write_output
from ptxbench.db.store import connect_reader, open_store
from ptxbench.tui.kernel_files import write_table

def _other_database(path: Path) -> Path:
    """Some other application's SQLite file, never opened as a store by this process."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (text TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.commit()
    conn.close()
    return path


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return small_store(tmp_path / "store.sqlite")


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of the folder byte for byte, the stores included, but for a store's -wal and -shm,
    which SQLite itself makes when the store is opened (where they must not appear, a test says so)."""
    return {
        p.name: p.read_bytes()
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(("-wal", "-shm")))


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "400"})


def _one_error_line(output: str, command: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"ptxbench {command}: error: "), output
    return lines[0]


# -- report: never over the store ----------------------------------------------------------------


@pytest.mark.parametrize(
    "option",
    [("--json",), ("--csv",), ("--headline", "--markdown"), ("--headline", "--json"), ("--headline", "--csv")],
    ids=["json", "csv", "headline-markdown", "headline-json", "headline-csv"],
)
def test_report_to_the_store_path_is_refused_and_the_store_is_byte_for_byte_intact(store, option):
    before = _snapshot(store.parent)
    done = _invoke("report", "--db", str(store), *option, str(store))
    assert done.exit_code == 2, done.output
    line = _one_error_line(done.output, "report")
    assert f"will not write {store}" in line and "it is the store" in line and "nothing was written" in line
    assert _snapshot(store.parent) == before


def test_report_to_a_link_to_the_store_a_dotted_path_or_its_companions_is_refused(store, tmp_path):
    link = tmp_path / "rows.json"
    link.symlink_to(store)
    (tmp_path / "sub").mkdir()
    before = _snapshot(tmp_path)
    targets = [
        link,
        tmp_path / "sub" / ".." / store.name,
        store.with_name(store.name + "-wal"),  # not there now: SQLite would read it as the store's log
        store.with_name(store.name + "-shm"),
        store.with_name(store.name + "-journal"),
    ]
    for target in targets:
        done = _invoke("report", "--db", str(store), "--csv", str(target))
        assert done.exit_code == 2, (target, done.output)
        assert "store" in _one_error_line(done.output, "report"), target
    assert _snapshot(tmp_path) == before
    assert link.is_symlink() and not store.with_name(store.name + "-wal").exists()


def test_report_to_the_default_store_is_refused_too(store, monkeypatch):
    monkeypatch.setenv("PTXBENCH_DB", str(store))
    before = _snapshot(store.parent)
    done = _invoke("report", "--json", str(store))
    assert done.exit_code == 2 and "it is the store" in done.output, done.output
    assert _snapshot(store.parent) == before


def test_report_to_another_sqlite_file_or_a_folder_is_refused_and_one_bad_output_writes_none(store, tmp_path):
    other = _other_database(tmp_path / "other.db")
    before = _snapshot(tmp_path)
    done = _invoke("report", "--db", str(store), "--csv", str(other))
    assert done.exit_code == 2 and "it is an SQLite database" in _one_error_line(done.output, "report")
    done = _invoke("report", "--db", str(store), "--csv", str(tmp_path))
    assert done.exit_code == 2 and "it is a folder" in done.output
    # The good output of the two is not written either: every target is checked first.
    done = _invoke("report", "--db", str(store), "--json", str(tmp_path / "fine.json"), "--csv", str(other))
    assert done.exit_code == 2, done.output
    assert _snapshot(tmp_path) == before


def test_report_writes_its_file_whole_through_a_temporary_file(store, tmp_path, monkeypatch):
    target = tmp_path / "rows.json"
    target.write_text("the old rows\n")
    target.chmod(0o640)
    done = _invoke("report", "--db", str(store), "--json", str(target))
    assert done.exit_code == 0, done.output
    assert json.loads(target.read_text()) == [] and oct(target.stat().st_mode & 0o777) == oct(0o640)
    # A write that fails half way leaves the old file as it was and no temporary file behind.
    target.write_text("the old rows\n")
    real_replace = os.replace

    def failing(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing)
    done = _invoke("report", "--db", str(store), "--json", str(target))
    monkeypatch.setattr(os, "replace", real_replace)
    assert done.exit_code == 2 and "cannot write" in _one_error_line(done.output, "report")
    assert target.read_text() == "the old rows\n"
    assert _files(tmp_path) == ["rows.json", "store.sqlite"]


# -- the check and the writer ------------------------------------------------------------------


def test_atomic_output_replaces_the_file_only_when_the_block_ends_well(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_output(target) as fh:
            fh.write("half a")
            raise RuntimeError("the rows ran out")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.csv"]
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    write_output(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "out.csv"]


def test_a_store_this_process_opened_is_recognised_without_being_named(tmp_path):
    store = small_store(tmp_path / "kept.sqlite")  # opened through open_store: remembered
    held = connect_reader(store)
    try:
        for path in (store, store.with_name("kept.sqlite-wal"), store.with_name("kept.sqlite-shm")):
            with pytest.raises(UnsafeOutput, match="of the store|it is the store"):
                check_output(path)
    finally:
        held.close()
    hard = tmp_path / "hard-link"
    os.link(store, hard)
    assert database_reason(hard) is not None and "the store" in database_reason(hard)
    assert isinstance(UnsafeOutput("x"), StoreError)


def test_a_companion_of_another_database_and_a_log_by_its_magic_are_refused(tmp_path):
    other = _other_database(tmp_path / "elsewhere.sqlite")
    assert "write-ahead log of the SQLite database" in database_reason(tmp_path / "elsewhere.sqlite-wal")
    wal_like = tmp_path / "renamed"
    wal_like.write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 28)
    assert database_reason(wal_like) == "it is an SQLite write-ahead log"
    assert database_reason(tmp_path / "plain.json") is None and other.exists()


def test_the_explorers_export_refuses_the_store_and_writes_whole_files(store, tmp_path):
    before = _snapshot(tmp_path)
    with pytest.raises(UnsafeOutput, match="it is the store"):
        write_table(store, ["id"], iter([{"id": 1}]), "csv", store=store)
    with pytest.raises(UnsafeOutput):
        write_table(store.with_name("store.sqlite-wal"), ["id"], iter([{"id": 1}]), "json", store=store)
    assert _snapshot(tmp_path) == before

    def rows():
        yield {"id": 1}
        raise RuntimeError("the read failed")

    out = tmp_path / "samples.csv"
    out.write_text("id\n7\n")
    with pytest.raises(RuntimeError):
        write_table(out, ["id"], rows(), "csv", store=store)
    assert out.read_text() == "id\n7\n" and _files(tmp_path) == ["samples.csv", "store.sqlite"]
    assert write_table(out, ["id"], iter([{"id": 1}, {"id": 2}]), "csv", store=store) == 2
    assert out.read_text().split() == ["id", "1", "2"]


# -- commands that add data: --db must be a store unless --create ---------------------------------


def _jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _kernel_line(**extra) -> dict:
    root = Path(__file__).resolve().parents[1] / "tasks" / "solutions" / "vector_add_smoke"
    return {
        "task": "vector_add_smoke",
        "model": "imported",
        "language": "ptx",
        "code": (root / "kernel.ptx").read_text(),
        "manifest": json.loads((root / "manifest.json").read_text()),
        **extra,
    }


@pytest.mark.parametrize(
    "command",
    [
        ("eval", "--all-unjudged", "--static"),
        ("import", "LINES", "--no-judge"),
        ("run", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--tasks", "vector_add_smoke", "--gpu", "off"),
        ("mcp", "--tasks", "vector_add_smoke", "--gpu", "off"),
        ("fixit", "pairs"),
        ("fixit", "export", "OUT"),
    ],
    ids=["eval", "import", "run", "mcp", "fixit-pairs", "fixit-export"],
)
def test_a_missing_store_named_by_a_command_that_adds_data_is_refused_and_not_created(tmp_path, command):
    lines = _jsonl(tmp_path / "lines.jsonl", [_kernel_line()])
    missing = tmp_path / "missing.sqlite"
    args = [str(lines) if a == "LINES" else str(tmp_path / "set.jsonl") if a == "OUT" else a for a in command]
    before = sorted(p.name for p in tmp_path.iterdir())
    done = _invoke(*args, "--db", str(missing))
    assert done.exit_code == 2, done.output
    name = " ".join(command[:2]) if command[0] == "fixit" else command[0]
    line = _one_error_line(done.output, name)
    assert f"no store at {missing}" in line and "--create" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no store, no -wal, no set


def test_an_empty_file_named_as_the_store_is_refused_too(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    done = _invoke("eval", "--db", str(empty), "--all-unjudged", "--static")
    assert done.exit_code == 2 and "is an empty file" in done.output and "--create" in done.output
    assert empty.stat().st_size == 0


def test_create_makes_the_store_for_import_and_eval(tmp_path):
    lines = _jsonl(tmp_path / "lines.jsonl", [_kernel_line()])
    made = tmp_path / "made.sqlite"
    done = _invoke("import", str(lines), "--db", str(made), "--create", "--no-judge", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["imported"] == 1
    db = open_store(made, readonly=True)
    assert db.execute("SELECT COUNT(*) FROM samples WHERE source LIKE 'import:%'").fetchone()[0] == 1
    db.conn.close()
    fresh = tmp_path / "fresh.sqlite"
    done = _invoke("eval", "--db", str(fresh), "--create", "--all-unjudged", "--static", "--json-progress")
    assert done.exit_code == 0, done.output
    assert fresh.is_file() and fresh.stat().st_size > 0
    # An existing store needs no --create, and --create on one changes nothing about it.
    done = _invoke("import", str(lines), "--db", str(made), "--create", "--no-judge", "--json")
    assert done.exit_code == 0 and json.loads(done.stdout)["skipped"] == 1, done.output


# -- import: a file a line names that is the store is never opened --------------------------------


def test_an_import_line_naming_the_store_is_reported_and_the_store_never_opened(tmp_path):
    """Closing any descriptor of the store drops this process's SQLite locks on it; a reader held
    open here would then lose its WAL to another process that closes its connection."""
    folder = tmp_path / "import"
    folder.mkdir()
    store = small_store(folder / "store.sqlite")
    other = _other_database(folder / "other.sqlite")
    held = connect_reader(store)  # a connection that stays open, as an explorer's does
    held.execute("SELECT COUNT(*) FROM samples").fetchone()
    try:
        lines = _jsonl(
            folder / "lines.jsonl",
            [
                _kernel_line(code=None, code_file="store.sqlite", sample_index=0),
                _kernel_line(manifest=None, manifest_file="store.sqlite-wal", sample_index=1),
                _kernel_line(code=None, code_file="other.sqlite", sample_index=2),
                _kernel_line(sample_index=3),
            ],
        )
        done = _invoke("import", str(lines), "--db", str(store), "--no-judge")
        subprocess.run([sys.executable, "-c", CHILD_WRITES, str(store), "after"], check=True, timeout=60)
        assert store.with_name("store.sqlite-wal").exists(), (
            "the store was opened outside SQLite: its locks were dropped"
        )
        assert done.exit_code == 2, done.output
        assert "nothing imported, 3 problem(s)" in done.output
        assert "line 1: 'store.sqlite': not read: it is the store" in done.output
        assert "line 2: 'store.sqlite-wal': not read: it is the write-ahead log of the store" in done.output
        assert "line 3: 'other.sqlite': not read: it is an SQLite database" in done.output
        assert held.execute("SELECT COUNT(*) FROM samples WHERE source LIKE 'import:%'").fetchone()[0] == 0
        assert held.execute("SELECT value FROM meta WHERE key = 'after'").fetchone() == ("x",)
    finally:
        held.close()
    assert other.exists()


def test_the_import_file_itself_may_not_be_the_store(store):
    before = _snapshot(store.parent)
    done = _invoke("import", str(store), "--db", str(store), "--no-judge")
    assert done.exit_code == 2 and "not a JSONL file to import: it is the store" in _one_error_line(
        done.output, "import"
    )
    assert _snapshot(store.parent) == before


# -- Fixit's export --------------------------------------------------------------------------------


def test_fixit_export_over_the_store_is_refused(store):
    before = _snapshot(store.parent)
    done = _invoke("fixit", "export", str(store), "--db", str(store))
    assert done.exit_code == 2, done.output
    assert "it is the store" in _one_error_line(done.output, "fixit export")
    assert _snapshot(store.parent) == before
