"""The paper's published numbers for the tasks PTXBench shares with it (tasks/published.toml).

Theirs, on their machines: shown beside PTXBench's own rows, never mixed into them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PUBLISHED_FILE = Path(__file__).with_name("published.toml")
TURN_LIMITS = (1, 4, 8)


@dataclass(frozen=True)
class Published:
    model: str
    device: str
    task_id: str
    definition: str        # their workload's name
    turn_limit: int
    best_speedup: float
    trajectories: int


@cache
def published() -> tuple[Published, ...]:
    data = tomllib.loads(PUBLISHED_FILE.read_text(encoding="utf-8"))
    out = []
    for entry in data["best"]:
        for definition, by_arch in data["tasks"].items():
            values = entry.get(definition)
            task_id = by_arch.get(entry["arch"])
            if values is None or task_id is None:
                continue
            for limit, value in zip(TURN_LIMITS, values):
                out.append(Published(entry["model"], entry["device"], task_id, definition, limit, float(value),
                                     int(entry["trajectories"])))
    return tuple(out)


def source() -> str:
    return str(tomllib.loads(PUBLISHED_FILE.read_text(encoding="utf-8"))["source"])


def best_published(task_id: str, turn_limit: int | None) -> Published | None:
    """Their best model's number for this task at this turn limit (the largest limit not above it)."""
    if turn_limit is None:
        turn_limit = max(TURN_LIMITS)
    limits = [t for t in TURN_LIMITS if t <= turn_limit]
    if not limits:
        return None
    rows = [p for p in published() if p.task_id == task_id and p.turn_limit == limits[-1]]
    return max(rows, key=lambda p: p.best_speedup, default=None)
