"""Soak and crash the store: many writers, readers, a lock hog and random kills; count what was lost.

    python benchmarks/store_soak.py --seconds 120              # the benchmark (docs/store.md quotes it)
    python benchmarks/store_soak.py --seconds 8 --json OUT     # what tests/test_store_soak.py runs

For `--seconds` it runs, on one fresh store:

- `--evals` slots, each starting real `ptxbench eval --static --json-progress` batches of a few
  samples one after another (PTXBENCH_LOCK_WAIT = `--patience`); each batch is left to finish,
  sent SIGTERM, or sent SIGKILL at a random moment 0.5–4 s after its start (a third each);
- `--labellers` label writers, each a process that keeps every label in the store's recovery
  journal and then writes it, as the explorer does (db/recovery.py `keep_label`,
  `add_label_once`); each is killed (SIGTERM or SIGKILL) every one to three seconds and started
  again;
- a lock hog that takes the write lock again and again, the first time for 2.5 × the patience
  (so that writers must give up and keep what they hold), later for up to that long;
- `--readers` reader threads reading counts and running `PRAGMA quick_check` through
  `StoreReader`.

Then everything is stopped, `ptxbench migrate` writes what the recovery journal holds, and each
write is counted:

- attempted: a sample a batch began judging, a label a writer began;
- confirmed: the writer said it was kept (`result` or a tool-failure `error` with its row, or
  `error` naming the recovery journal entry it went to; a label's journal entry written);
- present: the row is in the store at the end (by evaluation id; by the key of the journal entry;
  a label by all its fields);
- lost: confirmed but not present (must be 0); tracebacks: in any process's output (must be 0).

Also: rows written twice (0), the integrity check, journal entries left or set aside.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TASK = "vector_add_smoke"
SOURCE = "soak: benchmarks/store_soak.py (fixture, not model output)"
KEPT = re.compile(r"kept in the recovery journal \((\S+?\.json)\)")

LABELLER = r"""
import json, random, sys, time
from pathlib import Path
from ptxbench.db.recovery import add_label_once, discard, keep_label
from ptxbench.db.records import Label
from ptxbench.db.store import StoreError, now_iso, open_store
store, ids, tag, seed = Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
rng = random.Random(seed)
n = 0
while True:
    n += 1
    label = Label(sample_id=rng.choice(ids), author=f"soak-{tag}", note=f"{tag}-{n}\nsecond line",
                  fixit_candidate=rng.random() < 0.3, created_at=now_iso(precise=True))
    print(json.dumps({"begin": n}), flush=True)
    entry = keep_label(store, label, by=f"soak labeller {tag}")
    print(json.dumps({"kept": [label.sample_id, label.author, label.note, int(label.fixit_candidate),
                               label.created_at]}), flush=True)
    try:
        db = open_store(store, migrate=False, create=False)
        try:
            add_label_once(db, label)
        finally:
            db.conn.close()
        discard(entry)
    except StoreError as exc:
        print(json.dumps({"waits": str(exc)[:300]}), flush=True)
    time.sleep(rng.uniform(0.05, 0.3))
"""

HOG = r"""
import random, sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=120)
patience, rng = float(sys.argv[2]), random.Random(int(sys.argv[3]))
hold = 2.5 * patience
while True:
    time.sleep(rng.uniform(0.3, 1.0))
    conn.execute("BEGIN IMMEDIATE")
    print("held", flush=True)
    time.sleep(hold)
    conn.execute("ROLLBACK")
    hold = rng.uniform(0.05, 2.5 * patience)
"""


@dataclass
class Tally:
    eval_attempted: int = 0
    eval_rows: set[int] = field(default_factory=set)  # evaluation ids a batch reported committed
    eval_kept: set[str] = field(default_factory=set)  # key prefixes of judgements a batch reported kept
    labels_attempted: int = 0
    labels_kept: list[tuple] = field(default_factory=list)  # (sample, author, note, fixit, created_at)
    batches: int = 0
    labeller_runs: int = 0
    sigterm: int = 0
    sigkill: int = 0
    tracebacks: int = 0
    outputs_with_tracebacks: list[str] = field(default_factory=list)
    read_errors: list[str] = field(default_factory=list)
    reads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def build_store(path: Path, n: int) -> list[int]:
    """A store with the vector-add task and `n` samples of three kinds (correct and distinct, a syntax
    error, no code); every row says it is a soak fixture."""
    from ptxbench.db.records import Sample, Task
    from ptxbench.db.store import open_store
    from ptxbench.db.writes import add_sample, get_or_create_model, upsert_task
    from ptxbench.tasks.spec import get_task

    code = (ROOT / "tasks" / "solutions" / TASK / "kernel.ptx").read_text()
    manifest = json.loads((ROOT / "tasks" / "solutions" / TASK / "manifest.json").read_text())
    db = open_store(path)
    try:
        spec = get_task(TASK)
        upsert_task(db, Task(id=spec.id, title=spec.title, operation=spec.operation, arch=spec.arch,
                             families=list(spec.families), spec=spec.to_dict(), source=SOURCE))
        model = get_or_create_model(db, "soak-fixture", kind="import", source=SOURCE)
        ids = []
        for i in range(n):
            kind = i % 3
            if kind == 0:
                text = code.replace(".address_size 64", f".address_size 64\n.visible .global .u32 soak_{i};", 1)
                sample = Sample(task_id=TASK, language="ptx", code=text, manifest=manifest, source=SOURCE,
                                model_id=model.id, sample_index=i)
            elif kind == 1:
                sample = Sample(task_id=TASK, language="ptx", code=f"// {i}\n" + code.replace("add.", "add.bad.", 1),
                                source=SOURCE, model_id=model.id, sample_index=i)
            else:
                sample = Sample(task_id=TASK, language="none", response=f"sample {i}: no code", source=SOURCE,
                                model_id=model.id, sample_index=i)
            ids.append(add_sample(db, sample).id)
        return ids
    finally:
        db.conn.close()


def _tracebacks(tally: Tally, what: str, text: str) -> None:
    n = text.count("Traceback (most recent call last)")
    if n:
        with tally.lock:
            tally.tracebacks += n
            tally.outputs_with_tracebacks.append(f"{what}: {text[-1500:]}")


def _stop(proc: subprocess.Popen, sig: int, tally: Tally) -> None:
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            return
        with tally.lock:
            if sig == signal.SIGKILL:
                tally.sigkill += 1
            else:
                tally.sigterm += 1


def eval_slot(store: Path, ids: list[int], env: dict[str, str], until: float, rng: random.Random, tally: Tally) -> None:
    cmd = [sys.executable, "-m", "ptxbench.cli.main", "eval", "--db", str(store), "--static", "--json-progress"]
    while time.monotonic() < until:
        chosen = rng.sample(ids, k=min(len(ids), rng.randint(3, 8)))
        args = [a for sid in chosen for a in ("--sample", str(sid))]
        proc = subprocess.Popen([*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        fate = rng.choice(("finish", "term", "kill"))
        timer = None
        if fate != "finish":
            sig = signal.SIGTERM if fate == "term" else signal.SIGKILL
            timer = threading.Timer(rng.uniform(0.5, 4.0), _stop, (proc, sig, tally))
            timer.start()
        out, err = proc.communicate(timeout=600)
        if timer is not None:
            timer.cancel()
        with tally.lock:
            tally.batches += 1
        for line in out.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # the last line of a killed batch may be cut
            with tally.lock:
                if event.get("event") == "sample":
                    tally.eval_attempted += 1
                elif event.get("event") == "result":
                    tally.eval_rows.add(int(event["evaluation_id"]))
                elif event.get("event") == "error" and event.get("evaluation_id") is not None:
                    tally.eval_rows.add(int(event["evaluation_id"]))
                elif event.get("event") == "error":
                    found = KEPT.search(event.get("message", ""))
                    if found:
                        tally.eval_kept.add(Path(found.group(1)).stem.split("-")[2])
        _tracebacks(tally, "ptxbench eval", out + err)


def labeller_slot(store: Path, ids: list[int], env: dict[str, str], until: float, rng: random.Random, tag: str,
                  tally: Tally) -> None:
    n = 0
    while time.monotonic() < until:
        n += 1
        proc = subprocess.Popen([sys.executable, "-c", LABELLER, str(store), json.dumps(ids), f"{tag}{n}",
                                 str(rng.randrange(1 << 30))], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)
        sig = rng.choice((signal.SIGTERM, signal.SIGKILL))
        timer = threading.Timer(min(rng.uniform(1.0, 3.0), max(0.1, until - time.monotonic())), _stop,
                                (proc, sig, tally))
        timer.start()
        out, err = proc.communicate(timeout=600)
        timer.cancel()
        with tally.lock:
            tally.labeller_runs += 1
        for line in out.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with tally.lock:
                if "begin" in event:
                    tally.labels_attempted += 1
                elif "kept" in event:
                    tally.labels_kept.append(tuple(event["kept"]))
        _tracebacks(tally, "labeller", err)


def reader_slot(store: Path, until: float, tally: Tally) -> None:
    from ptxbench.db.reader import StoreReader
    from ptxbench.db.store import StoreError

    reader = StoreReader(store)
    n = 0
    try:
        while time.monotonic() < until:
            n += 1
            try:
                reader.read(lambda c: c.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
                            + c.execute("SELECT COUNT(*) FROM labels").fetchone()[0])
                if n % 20 == 0:
                    reader.check()
            except StoreError as exc:
                with tally.lock:
                    tally.read_errors.append(str(exc)[:300])
            with tally.lock:
                tally.reads += 1
            time.sleep(0.02)
    finally:
        reader.close()


def soak(folder: Path, *, seconds: float, samples: int = 48, evals: int = 2, labellers: int = 2, readers: int = 2,
         patience: float = 1.5, seed: int = 0) -> dict[str, Any]:
    """Run the soak in `folder` (a new store is made there) and return its figures."""
    folder.mkdir(parents=True, exist_ok=True)
    store = folder / "soak.sqlite"
    ids = build_store(store, samples)
    env = {**os.environ, "PTXBENCH_LOCK_WAIT": str(patience), "PTXBENCH_CACHE": str(folder / "asm-cache"),
           "PYTHONUNBUFFERED": "1"}
    rng = random.Random(seed)
    tally = Tally()
    started = time.monotonic()
    until = started + seconds
    hog = subprocess.Popen([sys.executable, "-c", HOG, str(store), str(patience), str(seed)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, env=env)
    threads = [threading.Thread(target=eval_slot, args=(store, ids, env, until, random.Random(rng.random()), tally))
               for _ in range(evals)]
    threads += [threading.Thread(target=labeller_slot,
                                 args=(store, ids, env, until, random.Random(rng.random()), chr(65 + i), tally))
                for i in range(labellers)]
    threads += [threading.Thread(target=reader_slot, args=(store, until, tally)) for _ in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    hog.kill()
    _, hog_err = hog.communicate(timeout=30)
    _tracebacks(tally, "lock hog", hog_err)
    ran = time.monotonic() - started
    final = subprocess.run([sys.executable, "-m", "ptxbench.cli.main", "migrate", "--db", str(store), "--json"],
                           capture_output=True, text=True, timeout=300, env=env)
    _tracebacks(tally, "ptxbench migrate", final.stdout + final.stderr)
    replayed = json.loads(final.stdout) if final.returncode == 0 else {"error": final.stderr[-500:]}
    return {**_count(store, tally), "seconds": round(ran, 1), "final_replay": replayed, "samples": samples,
            "evals": evals, "labellers": labellers, "readers": readers, "patience_s": patience, "seed": seed}


def _count(store: Path, tally: Tally) -> dict[str, Any]:
    from ptxbench.db.recovery import journal_dir

    conn = sqlite3.connect(store)
    try:
        rows = {r[0] for r in conn.execute("SELECT id FROM evaluations")}
        keys = [r[0] for r in conn.execute(
            "SELECT json_extract(evidence, '$.kept.key') FROM evaluations WHERE json_extract(evidence, '$.kept.key') "
            "IS NOT NULL")]
        labels = [tuple(r) for r in conn.execute(
            "SELECT sample_id, author, note, fixit_candidate, created_at FROM labels WHERE author LIKE 'soak-%'")]
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        foreign = conn.execute("PRAGMA foreign_key_check").fetchall()
    finally:
        conn.close()
    present_rows = len(tally.eval_rows & rows)
    present_kept = sum(1 for prefix in tally.eval_kept if any(k.startswith(prefix) for k in keys))
    label_set = set(labels)
    present_labels = sum(1 for lab in set(tally.labels_kept) if lab in label_set)
    confirmed = len(tally.eval_rows) + len(tally.eval_kept) + len(set(tally.labels_kept))
    present = present_rows + present_kept + present_labels
    folder = journal_dir(store)
    left = sorted(p.name for p in folder.glob("*.json")) if folder.exists() else []
    rejected = sorted(p.name for p in folder.glob("*.rejected")) if folder.exists() else []
    return {
        "writes_attempted": tally.eval_attempted + tally.labels_attempted,
        "writes_confirmed": confirmed,
        "writes_present": present,
        "lost": confirmed - present,
        "tracebacks": tally.tracebacks,
        "judgements": {"attempted": tally.eval_attempted, "committed": len(tally.eval_rows),
                       "kept_in_journal": len(tally.eval_kept), "present": present_rows + present_kept},
        "labels": {"attempted": tally.labels_attempted, "kept": len(set(tally.labels_kept)), "present": present_labels},
        "written_twice": {"judgements": len(keys) - len(set(keys)), "labels": len(labels) - len(label_set)},
        "batches": tally.batches, "labeller_runs": tally.labeller_runs,
        "signals": {"SIGTERM": tally.sigterm, "SIGKILL": tally.sigkill},
        "reads": tally.reads, "read_errors": tally.read_errors[:5], "integrity": integrity,
        "foreign_key_problems": len(foreign), "journal_left": left, "journal_set_aside": rejected,
        "traceback_outputs": tally.outputs_with_tracebacks[:3],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--samples", type=int, default=48)
    parser.add_argument("--evals", type=int, default=2)
    parser.add_argument("--labellers", type=int, default=2)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--patience", type=float, default=1.5, help="PTXBENCH_LOCK_WAIT of every writer")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dir", type=Path, default=None, help="where the store goes (default: a new temporary folder)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here too")
    args = parser.parse_args()
    import tempfile

    folder = args.dir or Path(tempfile.mkdtemp(prefix="ptxbench-soak-"))
    figures = soak(folder, seconds=args.seconds, samples=args.samples, evals=args.evals, labellers=args.labellers,
                   readers=args.readers, patience=args.patience, seed=args.seed)
    text = json.dumps(figures, indent=1)
    if args.json:
        args.json.write_text(text)
    print(text)
    for key in ("writes_attempted", "writes_confirmed", "writes_present", "lost", "tracebacks"):
        print(f"{key}: {figures[key]}", file=sys.stderr)
    ok = (figures["lost"] == 0 and figures["tracebacks"] == 0 and figures["integrity"] == "ok"
          and not figures["journal_left"] and not any(figures["written_twice"].values()))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
