"""Agent episodes and their steps: what an agent did, call by call, and the kernel it left.

An episode belongs to a run (a model × a context level, like any run) and one task slot
(task, sample index). Its steps are written as they happen — each model reply, each tool
call with its raw arguments, its result and its time, each note PTXBench added (a nudge, a
budget used up) — and never changed. When the episode ends its kernel is a sample of the run
(judged in full by the usual evaluation rows) and the episode row says how it ended.

Rows cross this boundary as the dataclasses below; the explorer reads `episode_rows`,
`episode_for_sample` and `steps_of` through its store reader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import sqlite_utils

from ptxbench.db import verdict
from ptxbench.db.records import Record, from_row, to_row
from ptxbench.db.store import now_iso, write_transaction
from ptxbench.db.writes import InvalidRecord, _insert

RUNNING = "running"
SUBMITTED = "submitted"
ENDED_PREFIX = "ended: "
STEP_KINDS = ("model", "tool", "note")


@dataclass
class Episode(Record):
    TABLE: ClassVar[str] = "agent_episodes"
    JSON_FIELDS: ClassVar[dict[str, Any]] = {"budgets": dict}

    run_id: int
    task_id: str
    agent: str                        # "ptxbench run --agent", "ptxbench mcp"
    source: str
    sample_index: int = 0
    sample_id: int | None = None
    status: str = RUNNING
    budgets: dict[str, Any] = field(default_factory=dict)
    turns: int = 0
    tool_calls: int = 0
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost: float | None = None
    gpu_s: float = 0.0
    wall_s: float | None = None
    started_at: str = ""
    finished_at: str | None = None
    id: int | None = None

    @property
    def finished(self) -> bool:
        return self.status != RUNNING


@dataclass
class Step(Record):
    TABLE: ClassVar[str] = "agent_steps"
    JSON_FIELDS: ClassVar[dict[str, Any]] = {"result": dict}

    episode_id: int
    step: int
    kind: str                         # model | tool | note
    status: str                       # ok | "error: …" | "skipped: …"
    result: dict[str, Any] = field(default_factory=dict)
    turn: int | None = None
    tool: str | None = None
    call_id: str | None = None
    arguments: str | None = None
    seconds: float | None = None
    gpu_s: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    created_at: str = ""
    id: int | None = None


# -- writing -----------------------------------------------------------------------------------------


def start_episode(db: sqlite_utils.Database, episode: Episode) -> Episode:
    """A new episode row, status `running`."""
    if episode.id is not None:
        raise InvalidRecord("start_episode: the episode already has an id")
    if not episode.source or not episode.agent:
        raise InvalidRecord("an episode says what drove it (agent) and where it came from (source)")
    episode = replace(episode, status=RUNNING, started_at=episode.started_at or now_iso())
    with write_transaction(db):
        return replace(episode, id=_insert(db, episode))


def add_step(db: sqlite_utils.Database, step: Step) -> Step:
    if step.kind not in STEP_KINDS:
        raise InvalidRecord(f"step.kind must be one of {STEP_KINDS}, got {step.kind!r}")
    if not step.status:
        raise InvalidRecord("step.status is empty")
    step = replace(step, created_at=step.created_at or now_iso())
    with write_transaction(db):
        return replace(step, id=_insert(db, step))


def next_step_number(db: sqlite_utils.Database, episode_id: int) -> int:
    row = db.execute("SELECT MAX(step) FROM agent_steps WHERE episode_id = ?", [episode_id]).fetchone()
    return (row[0] or 0) + 1


_PROGRESS = ("turns", "tool_calls", "tokens_in", "tokens_out", "cost", "gpu_s", "wall_s")


def update_episode(db: sqlite_utils.Database, episode: Episode) -> None:
    """Write the episode's running totals (turns, calls, tokens, cost, GPU and wall time)."""
    row = to_row(episode)
    with write_transaction(db):
        cur = db.execute(f"UPDATE agent_episodes SET {', '.join(f'{c} = ?' for c in _PROGRESS)} WHERE id = ?",
                         [row[c] for c in _PROGRESS] + [episode.id])
        if cur.rowcount != 1:
            raise InvalidRecord(f"update_episode: no episode with id {episode.id}")


def finish_episode(db: sqlite_utils.Database, episode: Episode, status: str, sample_id: int | None) -> Episode:
    """The episode's end: how it ended, the sample it left, its totals."""
    if status == RUNNING or not (status == SUBMITTED or status.startswith(ENDED_PREFIX)):
        raise InvalidRecord(f"finish_episode: status must be {SUBMITTED!r} or start with {ENDED_PREFIX!r}")
    done = replace(episode, status=status, sample_id=sample_id, finished_at=now_iso())
    row = to_row(done)
    cols = (*_PROGRESS, "status", "sample_id", "finished_at")
    with write_transaction(db):
        cur = db.execute(f"UPDATE agent_episodes SET {', '.join(f'{c} = ?' for c in cols)} WHERE id = ?",
                         [row[c] for c in cols] + [episode.id])
        if cur.rowcount != 1:
            raise InvalidRecord(f"finish_episode: no episode with id {episode.id}")
    return done


def abandon_running(db: sqlite_utils.Database, run_id: int, task_id: str, sample_index: int) -> int:
    """Episodes of this slot still `running` (their process died): marked `ended: interrupted`.
    Their steps stay; a resumed run starts the slot again. Returns how many there were."""
    with write_transaction(db):
        cur = db.execute(
            "UPDATE agent_episodes SET status = ?, finished_at = ? WHERE run_id = ? AND task_id = ? "
            "AND sample_index = ? AND status = ?",
            [ENDED_PREFIX + "interrupted", now_iso(), run_id, task_id, sample_index, RUNNING])
        return cur.rowcount


# -- reading -----------------------------------------------------------------------------------------


def _episodes(db: Any, sql: str, params: list[Any]) -> list[Episode]:
    cur = db.execute(sql, params)
    names = [d[0] for d in cur.description]
    return [from_row(Episode, dict(zip(names, row))) for row in cur.fetchall()]


def get_episode(db: Any, episode_id: int) -> Episode | None:
    found = _episodes(db, "SELECT * FROM agent_episodes WHERE id = ?", [episode_id])
    return found[0] if found else None


def finished_episode(db: Any, run_id: int, task_id: str, sample_index: int) -> Episode | None:
    """The slot's episode that ended with a sample (a resumed run skips the slot)."""
    found = _episodes(db, "SELECT * FROM agent_episodes WHERE run_id = ? AND task_id = ? AND sample_index = ? "
                          "AND sample_id IS NOT NULL ORDER BY id DESC LIMIT 1", [run_id, task_id, sample_index])
    return found[0] if found else None


def run_episodes(db: Any, run_id: int) -> list[Episode]:
    return _episodes(db, "SELECT * FROM agent_episodes WHERE run_id = ? ORDER BY id", [run_id])


def episode_for_sample(db: Any, sample_id: int) -> Episode | None:
    """The episode that left this sample, if an agent made it."""
    found = _episodes(db, "SELECT * FROM agent_episodes WHERE sample_id = ? ORDER BY id DESC LIMIT 1", [sample_id])
    return found[0] if found else None


def steps_of(db: Any, episode_id: int) -> list[Step]:
    cur = db.execute("SELECT * FROM agent_steps WHERE episode_id = ? ORDER BY step", [episode_id])
    names = [d[0] for d in cur.description]
    return [from_row(Step, dict(zip(names, row))) for row in cur.fetchall()]


@dataclass(frozen=True)
class EpisodeRow:
    """One episode as the explorer lists it: who, what, how it ended, and its kernel's verdict."""

    episode_id: int
    run_id: int
    run_name: str
    model: str
    task_id: str
    sample_index: int
    agent: str
    status: str
    turns: int
    tool_calls: int
    tokens: int | None
    wall_s: float | None
    gpu_s: float
    sample_id: int | None
    category: str | None        # the verdict that speaks for the sample (db/verdict.py)
    speedup: float | None
    started_at: str


def episode_rows(db: Any, limit: int = 2000) -> list[EpisodeRow]:
    """The newest episodes first, each with the verdict of the kernel it left."""
    rows = db.execute(
        f"""
        SELECT a.id, a.run_id, r.name, COALESCE(m.name, '(no model)'), a.task_id, a.sample_index, a.agent,
               a.status, a.turns, a.tool_calls,
               CASE WHEN a.tokens_in IS NULL AND a.tokens_out IS NULL THEN NULL
                    ELSE COALESCE(a.tokens_in, 0) + COALESCE(a.tokens_out, 0) END,
               a.wall_s, a.gpu_s, a.sample_id, e.category, e.speedup, a.started_at
        FROM agent_episodes a
        JOIN runs r ON r.id = a.run_id
        LEFT JOIN models m ON m.id = r.model_id
        LEFT JOIN samples s ON s.id = a.sample_id
        LEFT JOIN evaluations e ON e.id = {verdict.shown_for(db)}
        ORDER BY a.id DESC LIMIT ?
        """,
        [limit],
    ).fetchall()
    return [EpisodeRow(*row) for row in rows]


def step_arguments(step: Step) -> Any:
    """A tool step's arguments as JSON when they parse, else the raw text the model sent."""
    if step.arguments is None:
        return None
    try:
        return json.loads(step.arguments)
    except ValueError:
        return step.arguments
