"""Every SQLite failure a person can meet is one line that says what to do, and costs no work.

Made for real: a file-size limit (`ulimit -f`) and a full disk (a small tmpfs in a private mount
namespace) in the middle of a transaction, read-only media with a WAL that holds commits and no
-shm, an old schema, a migration killed while it backs the store up, two imports of one file at
once, `fixit stats` on read-only media.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "hostile"))

from hostile_store import build_store, eval_env, store_problems
from store_faults import damage_middle, readonly_command, small_store
from test_migrations import _v1_store

from ptxbench.db import recovery
from ptxbench.db.seed import ensure_default_store
from ptxbench.db.store import StoreDamaged, latest_version, open_store

SOLUTION = Path(__file__).resolve().parents[1] / "tasks" / "solutions" / "vector_add_smoke"


def _cli(*args: str, env: dict[str, str] | None = None, limit: int | None = None, timeout: float = 180,
         ) -> subprocess.CompletedProcess:
    def limited() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "ptxbench.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env or dict(os.environ), preexec_fn=limited)


def _big_import(path: Path, lines: int, *, pad: int = 60_000, run: str = "big") -> Path:
    code = (SOLUTION / "kernel.ptx").read_text()
    manifest = json.loads((SOLUTION / "manifest.json").read_text())
    with path.open("w") as fh:
        for i in range(lines):
            padded = f"// {i} " + "x" * pad + "\n" + code
            fh.write(json.dumps({"task": "vector_add_smoke", "model": "big", "run": run, "language": "ptx",
                                 "code": padded, "manifest": manifest, "sample_index": i}) + "\n")
    return path


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "nothing said"
    return " ".join(lines)


# -- the disk refuses a write in the middle of a transaction ------------------------------------------


def test_a_file_size_limit_in_the_middle_of_an_import_is_one_line_and_nothing_half_written(tmp_path):
    """Before: sqlite3.OperationalError reached the person as a traceback."""
    store = tmp_path / "store.sqlite"
    build_store(store, 2)
    lines = _big_import(tmp_path / "big.jsonl", 40)
    size = store.stat().st_size
    done = _cli("import", str(lines), "--db", str(store), "--no-judge", limit=size + 256 * 1024)
    said = _one_line(done.stderr)
    assert done.returncode == 1, said
    assert "could not be written" in said and "ulimit -f" in said and "rolled back" in said
    assert store_problems(store) == []
    conn = sqlite3.connect(store)
    assert conn.execute("SELECT COUNT(*) FROM samples WHERE source LIKE 'import:%'").fetchone()[0] == 0
    conn.close()


def test_a_file_size_limit_while_judging_keeps_the_judgement(tmp_path):
    """The store's log cannot grow; the judgement goes to the recovery journal (a small file) instead."""
    store = tmp_path / "store.sqlite"
    build_store(store, 48)
    env = eval_env(tmp_path / "asm-cache")
    warm = tmp_path / "warm.sqlite"
    build_store(warm, 48)
    assert _cli("eval", "--db", str(warm), "--all-unjudged", "--static", env=env).returncode == 0  # tools' cache
    done = _cli("eval", "--db", str(store), "--all-unjudged", "--static", "--json-progress", env=env,
                limit=max(store.stat().st_size, 1) + 96 * 1024)
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert done.returncode == 3, done.stderr[-2000:]
    kept = [e for e in map(json.loads, done.stdout.splitlines()) if e["event"] == "error"]
    assert len(kept) == 1 and "ulimit -f" in kept[0]["message"] and "recovery journal" in kept[0]["message"]
    assert len(recovery.pending(store)) == 1
    again = _cli("eval", "--db", str(store), "--all-unjudged", "--static", env=env)
    assert again.returncode == 0, again.stderr
    conn = sqlite3.connect(store)
    counts = conn.execute("SELECT COUNT(*), COUNT(DISTINCT sample_id) FROM evaluations").fetchone()
    conn.close()
    assert counts == (48, 48) and recovery.pending(store) == [] and store_problems(store) == []


INSIDE_A_FULL_DISK = r"""
set -e
mount -t tmpfs -o size="$1" none "$2"
cp "$3" "$2/store.sqlite"
set +e
"$4" -m ptxbench.cli.main import "$5" --db "$2/store.sqlite" --no-judge > "$6/out" 2> "$6/err"
echo $? > "$6/rc"
"$4" -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); print(c.execute("PRAGMA integrity_check").fetchone()[0], c.execute("SELECT COUNT(*) FROM samples").fetchone()[0])' "$2/store.sqlite" > "$6/check"
"""


def test_a_full_disk_in_the_middle_of_an_import_is_one_line_and_the_store_is_whole(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a small tmpfs in a private namespace")
    store = tmp_path / "store.sqlite"
    build_store(store, 2)
    before = sqlite3.connect(store).execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    lines = _big_import(tmp_path / "big.jsonl", 40)
    disk = tmp_path / "disk"
    disk.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    size = store.stat().st_size + 512 * 1024
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", INSIDE_A_FULL_DISK, "sh",
                            str(size), str(disk), str(store), sys.executable, str(lines), str(out)],
                           capture_output=True, text=True, timeout=180)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {probe.stderr.strip()}")
    said = _one_line((out / "err").read_text())
    assert (out / "rc").read_text().strip() == "1", said
    assert "the disk is full" in said and "rolled back" in said
    assert (out / "check").read_text().split() == ["ok", str(before)]


# -- read-only, old, damaged -----------------------------------------------------------------------------


KEEP_A_WAL = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute("PRAGMA wal_autocheckpoint = 0")
conn.execute("INSERT INTO meta (key, value, updated_at) VALUES ('only-in-the-wal', 'x', 'now')")
conn.commit()
os._exit(0)
"""

READ = """
import json, sys
from pathlib import Path
from ptxbench.db.reader import StoreReader, prepare_store
path = Path(sys.argv[1])
access = prepare_store(path)
reader = StoreReader(path, access=access)
print(json.dumps({"reason": access.reason, "copy": access.private_copy,
                  "wal_row": reader.read(lambda c: c.execute("SELECT COUNT(*) FROM meta WHERE key = 'only-in-the-wal'").fetchone()[0])}))
"""


def test_read_only_media_with_commits_in_the_wal_and_no_shm_is_read_through_a_private_copy(tmp_path):
    """Before: "unable to open database file", and nothing said what to do."""
    media = tmp_path / "media"
    media.mkdir()
    store = small_store(media / "store.sqlite")
    subprocess.run([sys.executable, "-c", KEEP_A_WAL, str(store)], check=True, timeout=60)
    Path(f"{store}-shm").unlink()
    assert Path(f"{store}-wal").stat().st_size > 0
    done = subprocess.run(readonly_command(media, [sys.executable, "-c", READ, str(store)]), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["copy"] is True and got["wal_row"] == 1  # the WAL's commit is read, not ignored
    assert "private copy" in got["reason"]
    assert sorted(p.name for p in media.iterdir()) == ["store.sqlite", "store.sqlite-wal"]  # nothing made there


def test_fixit_stats_reads_a_store_on_read_only_media(tmp_path):
    """Before: refused, as if it were going to write."""
    media = tmp_path / "media"
    media.mkdir()
    store = small_store(media / "store.sqlite")
    argv = readonly_command(media, [sys.executable, "-m", "ptxbench.cli.main", "fixit", "stats", "--db", str(store),
                                    "--json"])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["pairs"] == 0


def test_an_old_store_names_the_command_that_upgrades_it_and_that_command_does(tmp_path):
    """Before: the message advised `ptxbench tasks`, which never opens a store."""
    store = tmp_path / "old.sqlite"
    _v1_store(store)
    refused = _cli("report", "--db", str(store))
    said = _one_line(refused.stderr)
    assert refused.returncode == 2 and f"ptxbench migrate --db {store}" in said
    migrated = _cli("migrate", "--db", str(store), "--json")
    assert migrated.returncode == 0, migrated.stderr
    out = json.loads(migrated.stdout)
    assert (out["from_version"], out["to_version"]) == (1, latest_version()) and Path(out["backup"]).exists()
    assert _cli("report", "--db", str(store)).returncode == 0


def test_a_damaged_store_names_the_newest_whole_backup(tmp_path):
    store = tmp_path / "s.sqlite"
    _v1_store(store)
    open_store(store).conn.close()  # migrated: a backup beside it
    (backup,) = tmp_path.glob("s.sqlite.bak-v1-*")
    damage_middle(store)
    db = open_store(store, readonly=True)
    with pytest.raises(StoreDamaged, match=f"copy the newest backup, {backup}, to {store}"):
        from ptxbench.db.store import quick_check

        quick_check(db, store)
    db.conn.close()


# -- a migration killed while it backs the store up ------------------------------------------------------


MIGRATE = """
import sys
from ptxbench.db.store import open_store
open_store(sys.argv[1]).conn.close()
"""


def _big_v1_store(path: Path) -> int:
    _v1_store(path)
    conn = sqlite3.connect(path)
    for i in range(160):
        conn.execute("INSERT INTO samples (task_id, language, code, content_hash, source, created_at) "
                     "VALUES ('t1', 'ptx', ?, ?, 'test', '2026-01-01')", ["y" * 250_000, f"h{i}"])
    conn.commit()
    n = conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    conn.close()
    return n


def _whole(backup: Path, samples: int) -> bool:
    try:
        conn = sqlite3.connect(f"file:{backup}?mode=ro", uri=True)
        try:
            return (conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
                    and conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == samples)
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def test_a_migration_killed_while_backing_up_leaves_no_backup_that_is_not_whole(tmp_path):
    """Before: the .bak file was written in place; killed half way it restored to an empty store."""
    store = tmp_path / "s.sqlite"
    samples = _big_v1_store(store)
    killed_during_backup = False
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-c", MIGRATE, str(store)])
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if any("bak-v1" in name for name in os.listdir(tmp_path)):
                os.kill(proc.pid, signal.SIGKILL)
                break
        proc.wait(timeout=30)
        if sqlite3.connect(store).execute("PRAGMA user_version").fetchone()[0] == 1:
            killed_during_backup = True
            break
    assert killed_during_backup, "every try finished its backup before the kill"
    for backup in tmp_path.glob("s.sqlite.bak-v*"):
        assert _whole(backup, samples), f"{backup.name} is not a whole copy of the store"
    open_store(store).conn.close()  # the migration run again: one whole backup, the half one removed
    assert sqlite3.connect(store).execute("PRAGMA user_version").fetchone()[0] == latest_version()
    assert [p for p in tmp_path.iterdir() if p.name.endswith(".part")] == []
    backups = list(tmp_path.glob("s.sqlite.bak-v1-*"))
    assert backups and all(_whole(b, samples) for b in backups)


# -- two imports of one file at once ------------------------------------------------------------------------


def test_two_imports_of_one_file_at_once_judge_each_sample_once_and_finish_the_run(tmp_path):
    """Before: each import judged every sample (two rows each), and the run never got finished_at."""
    store = tmp_path / "store.sqlite"
    ensure_default_store(store).conn.close()
    code = (SOLUTION / "kernel.ptx").read_text()
    manifest = json.loads((SOLUTION / "manifest.json").read_text())
    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(
        json.dumps({"task": "vector_add_smoke", "model": "twice", "run": "r", "language": "ptx", "manifest": manifest,
                    "code": code.replace(".address_size 64", f".address_size 64\n.visible .global .u32 v{i};", 1),
                    "sample_index": i}) + "\n" for i in range(10)))
    env = eval_env(tmp_path / "asm-cache")
    cmd = [sys.executable, "-m", "ptxbench.cli.main", "import", str(lines), "--db", str(store), "--gpu", "off", "--json"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        reports.append(json.loads(out))
    conn = sqlite3.connect(store)
    per_sample = conn.execute(
        "SELECT s.id, COUNT(e.id) FROM samples s JOIN runs r ON r.id = s.run_id LEFT JOIN evaluations e "
        "ON e.sample_id = s.id WHERE r.name = 'r' GROUP BY s.id").fetchall()
    finished = conn.execute("SELECT finished_at FROM runs WHERE name = 'r'").fetchall()
    claims = conn.execute("SELECT COUNT(*) FROM meta WHERE key LIKE 'claim:%'").fetchone()[0]
    conn.close()
    assert len(per_sample) == 10 and {n for _, n in per_sample} == {1}
    assert sum(r["judged"] for r in reports) == 10
    assert sum(r["judged_elsewhere"] for r in reports) == 10
    assert len(finished) == 1 and finished[0][0] is not None
    assert claims == 0
