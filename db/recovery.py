"""The recovery journal: what a writer computed or a person typed, kept when the store would not take it.

A judgement costs GPU time and a label costs a person's attention; neither may be lost
because another process held the store, the disk filled up, or the process was stopped
while it waited. So:

- A judgement (`add_evaluation_kept`) is written to the store as always; when the write has
  to wait for another writer, the judgement is first kept in the journal (a kill during the
  wait then loses nothing), and when the store refuses it (lock held past the patience, a
  stop, a full disk, an I/O error) it stays there and `Kept` says where.
- A label typed in the explorer is kept in the journal before it is written at all
  (`keep_label`), and the entry is removed once the store has it. Its time is to the
  microsecond, so that its fields are its identity (two labels a person gives one sample
  within a second stay two).
- Every writer replays the journal when it opens the store (`replay`: the CLI's writers
  through db/seed.py `open_for_writing`, `ptxbench migrate`, the explorer on start) and
  says what it wrote.

The journal is the folder `.<store name>.recovery` beside the store, one file per entry,
each written whole or not at all (a hidden `.part` file, flushed to disk, renamed into
place), so concurrent writers never share a file and a crash never leaves half an entry.
An entry carries a key; the row written from it carries the key too (an evaluation in
`evidence.kept`, a label by all its fields), so an entry written twice (by its own process
and by another's replay, or replayed again after a crash between the commit and the file's
removal) is one row. An entry the store can never take (its sample is gone) is set aside
as `NAME.json.rejected` and reported, never dropped silently.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import sqlite_utils

from ptxbench.db.access import StoreError
from ptxbench.db.records import Evaluation, Label, Measurement, from_row, to_row
from ptxbench.db.store import before_waiting, fsync_folder, now_iso, store_file, write_transaction
from ptxbench.db.writes import InvalidRecord, add_evaluation, add_label

FORMAT = 1
KINDS = ("evaluation", "label")
NOUNS = {"evaluation": "judgement", "label": "label"}


class Kept(StoreError):
    """The store refused a write; what it held is in the recovery journal (`entry`)."""

    def __init__(self, message: str, entry: Path) -> None:
        super().__init__(message)
        self.entry = entry


def journal_dir(store: Path) -> Path:
    """The recovery journal of the store at `store` (a hidden folder beside it)."""
    return store.parent / f".{store.name}.recovery"


def pending(store: Path) -> list[Path]:
    """The entries waiting to be written, oldest first."""
    try:
        return sorted(journal_dir(store).glob("*.json"))
    except OSError:
        return []


def _write_entry(store: Path, kind: str, key: str, payload: dict[str, Any], *, why: str, by: str) -> Path:
    folder = journal_dir(store)
    name = f"{time.time_ns():020d}-{os.getpid()}-{key[:12]}.json"
    data = {"format": FORMAT, "kind": kind, "key": key, "kept_at": now_iso(), "why": why, "by": by, **payload}
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, default=str)
    try:
        folder.mkdir(exist_ok=True)
        part = folder / f".{name}.part"
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(part, folder / name)
        except BaseException:
            with contextlib.suppress(OSError):
                part.unlink()
            raise
        fsync_folder(folder)
    except OSError as exc:
        raise StoreError(f"could not keep the {kind} in the recovery journal {folder} either: "
                         f"{exc.strerror or exc}") from None
    return folder / name


def discard(entry: Path | None) -> None:
    """An entry the store now has (another process may have removed it first)."""
    if entry is not None:
        with contextlib.suppress(FileNotFoundError):
            entry.unlink()


def new_key() -> str:
    return secrets.token_hex(12)


# -- judgements ----------------------------------------------------------------------------------


def keep_evaluation(store: Path, evaluation: Evaluation, measurements: list[Measurement], *, why: str,
                    by: str) -> Path:
    """Keep a judgement in the journal; its key goes into `evaluation.evidence["kept"]` (the row
    written later, from here or from the journal, carries it)."""
    kept = evaluation.evidence.setdefault("kept", {})
    kept.setdefault("key", new_key())
    kept.setdefault("at", now_iso())
    kept.setdefault("why", why[:500])
    row = to_row(replace(evaluation, id=None))
    rows = [to_row(replace(m, id=None, evaluation_id=None)) for m in measurements]
    return _write_entry(store, "evaluation", kept["key"], {"evaluation": row, "measurements": rows}, why=why, by=by)


def _kept_key(evaluation: Evaluation) -> str | None:
    kept = evaluation.evidence.get("kept") if isinstance(evaluation.evidence, dict) else None
    return kept.get("key") if isinstance(kept, dict) else None


def _evaluation_with_key(db: sqlite_utils.Database, sample_id: int, key: str) -> Evaluation | None:
    cur = db.execute("SELECT * FROM evaluations WHERE sample_id = ? AND json_extract(evidence, '$.kept.key') = ?",
                     [sample_id, key])
    row = cur.fetchone()
    return None if row is None else from_row(Evaluation, dict(zip([d[0] for d in cur.description], row)))


def write_evaluation_once(db: sqlite_utils.Database, evaluation: Evaluation,
                          measurements: list[Measurement]) -> tuple[Evaluation, bool]:
    """(the row, whether it was already there): a kept judgement is written once, whoever writes it."""
    with write_transaction(db):
        key = _kept_key(evaluation)  # read under the lock: a wait for it may have kept the judgement just now
        if key is not None:
            found = _evaluation_with_key(db, evaluation.sample_id, key)
            if found is not None:
                return found, True
        return add_evaluation(db, evaluation, measurements), False


def add_evaluation_kept(db: sqlite_utils.Database, evaluation: Evaluation,
                        measurements: Iterable[Measurement] = (), *, by: str) -> Evaluation:
    """`add_evaluation`, keeping the judgement in the recovery journal when the store makes it wait
    (kept before the wait) or refuses it. Raises `Kept` (a StoreError) saying where it is, or
    InvalidRecord for a record the store can never take. Inside a caller's transaction it is a plain
    `add_evaluation`: the caller's whole transaction stands or falls together."""
    measurements = list(measurements)
    store = store_file(db)
    if store is None or db.conn.in_transaction:
        return add_evaluation(db, evaluation, measurements)
    evaluation.created_at = evaluation.created_at or now_iso()  # the judgement's time, wherever it is written
    entry: Path | None = None

    def keep_before_waiting() -> None:
        nonlocal entry
        with contextlib.suppress(StoreError):  # no journal here: the write may still succeed after the wait
            entry = keep_evaluation(store, evaluation, measurements,
                                    why="waited for a store another process was writing", by=by)

    try:
        with before_waiting(keep_before_waiting):
            row, _ = write_evaluation_once(db, evaluation, measurements)
    except InvalidRecord:
        discard(entry)
        raise
    except StoreError as exc:
        if entry is None:
            try:
                entry = keep_evaluation(store, evaluation, measurements, why=str(exc), by=by)
            except StoreError as lost:
                raise StoreError(f"{exc}. The judgement of sample {evaluation.sample_id} is lost: {lost}") from None
        raise Kept(
            f"{exc}. The judgement of sample {evaluation.sample_id} is kept in the recovery journal "
            f"({entry}); the next PTXBench that writes this store writes it first "
            f"(`ptxbench migrate --db {store}` does it now)",
            entry,
        ) from None
    discard(entry)
    return row


# -- labels ------------------------------------------------------------------------------------------


def keep_label(store: Path, label: Label, *, by: str, why: str = "typed; not yet in the store") -> Path:
    """Keep a label before it is written (the explorer does this for every label)."""
    label = replace(label, id=None, created_at=label.created_at or now_iso(precise=True))
    return _write_entry(store, "label", new_key(), {"label": to_row(label)}, why=why, by=by)


def same_label(db: sqlite_utils.Database, label: Label) -> Label | None:
    """A stored label with every field of `label` (the same label, written before)."""
    cur = db.execute(
        "SELECT * FROM labels WHERE sample_id = ? AND author = ? AND category IS ? AND note = ? "
        "AND fixit_candidate = ? AND created_at = ? ORDER BY id LIMIT 1",
        [label.sample_id, label.author, label.category, label.note, int(bool(label.fixit_candidate)),
         label.created_at],
    )
    row = cur.fetchone()
    return None if row is None else from_row(Label, dict(zip([d[0] for d in cur.description], row)))


@dataclass(frozen=True)
class LabelWrite:
    label: Label  # the stored row
    already: bool  # it was there (written from the journal by another process)
    overtaken: Label | None  # the sample's newest label when it was written, if not the one the person saw


NOT_CHECKED = -1  # `seen` for a write that does not look for another explorer's label


def add_label_once(db: sqlite_utils.Database, label: Label, *, seen: int | None = NOT_CHECKED) -> LabelWrite:
    """Write a label unless the same label is stored; `seen` is the id of the sample's newest label
    when the person opened the dialog (None: it had none). A newer one written since (another
    explorer's) is returned as `overtaken`: this label becomes the current one, and the other stays
    in the history, but the person is told whose it was and when it was typed."""
    label = replace(label, created_at=label.created_at or now_iso(precise=True))
    with write_transaction(db):
        found = same_label(db, label)
        newest_cur = db.execute("SELECT * FROM labels WHERE sample_id = ? ORDER BY id DESC LIMIT 1", [label.sample_id])
        row = newest_cur.fetchone()
        newest = None if row is None else from_row(Label, dict(zip([d[0] for d in newest_cur.description], row)))
        overtaken = None
        if seen != NOT_CHECKED and newest is not None and newest.id != seen and (found is None or newest.id != found.id):
            overtaken = newest
        if found is not None:
            return LabelWrite(found, True, overtaken)
        return LabelWrite(add_label(db, label), False, overtaken)


# -- replaying ----------------------------------------------------------------------------------------


@dataclass
class Replayed:
    folder: Path
    written: Counter[str] = field(default_factory=Counter)  # kind -> rows written now
    already: int = 0  # entries whose row was there (written by their own process)
    set_aside: list[str] = field(default_factory=list)  # entries the store can never take, and why
    left: int = 0  # entries still waiting (the store refused again)
    error: str | None = None  # why they wait

    @property
    def anything(self) -> bool:
        return bool(self.written or self.already or self.set_aside or self.left)

    def message(self) -> str:
        """One paragraph for a person; "" when the journal was empty."""
        if not self.anything:
            return ""
        parts = []
        if self.written:
            what = " and ".join(f"{n} {NOUNS[kind]}{'s' if n != 1 else ''}" for kind, n in sorted(self.written.items()))
            parts.append(f"wrote {what} kept in the recovery journal {self.folder} (by a process that could not "
                         "write the store, or was stopped before it did)")
        if self.already:
            parts.append(f"{self.already} entr{'ies' if self.already != 1 else 'y'} of the journal were in the store "
                         "already and were removed")
        if self.set_aside:
            parts.append(f"{len(self.set_aside)} entr{'ies' if len(self.set_aside) != 1 else 'y'} the store cannot "
                         "take were set aside (*.rejected): " + "; ".join(self.set_aside[:3]))
        if self.left:
            parts.append(f"{self.left} entr{'ies' if self.left != 1 else 'y'} still wait in {self.folder}: {self.error}")
        return "; ".join(parts)


def _set_aside(entry: Path, why: str, out: Replayed) -> None:
    with contextlib.suppress(OSError):
        os.replace(entry, entry.with_name(entry.name + ".rejected"))
    out.set_aside.append(f"{entry.name}: {why}")


def replay(db: sqlite_utils.Database, store: Path | None = None) -> Replayed:
    """Write every entry of the store's journal (each once, oldest first) and remove it. An entry
    that cannot ever be written is set aside; a store that refuses (locked, full) stops the replay,
    and what is left waits for the next writer."""
    store = store or store_file(db)
    if store is None:
        return Replayed(Path())
    out = Replayed(journal_dir(store))
    entries = pending(store)
    for n, entry in enumerate(entries):
        try:
            data = json.loads(entry.read_text(encoding="utf-8"))
            kind = data["kind"]
            if data.get("format") != FORMAT or kind not in KINDS:
                raise ValueError(f"format {data.get('format')!r}, kind {kind!r}")
        except FileNotFoundError:
            continue  # written meanwhile by its own process, or by another replay
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _set_aside(entry, f"not a journal entry ({exc})", out)
            continue
        try:
            if kind == "evaluation":
                evaluation = from_row(Evaluation, data["evaluation"])
                measurements = [from_row(Measurement, m) for m in data.get("measurements", [])]
                _, already = write_evaluation_once(db, evaluation, measurements)
            else:
                already = add_label_once(db, from_row(Label, data["label"])).already
        except InvalidRecord as exc:
            _set_aside(entry, str(exc), out)
            continue
        except (KeyError, TypeError, ValueError) as exc:
            _set_aside(entry, f"not a journal entry ({type(exc).__name__}: {exc})", out)
            continue
        except StoreError as exc:
            out.left = len(entries) - n
            out.error = str(exc)
            break
        if already:
            out.already += 1
        else:
            out.written[kind] += 1
        discard(entry)
    return out
