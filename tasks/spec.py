"""Task specs: the TOML files in tasks/specs/, loaded and checked into `TaskSpec` records.

A spec is data: the operation (the name of a reference function), the tensors
with symbolic shapes, the target arch, the requested instruction families, FLOP
and byte counts, tolerance, sizes (headline, train, held-out) and the default
launch manifest. docs/tasks.md describes the format field by field.

Every error names the file and the field, so a broken spec is quick to fix.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from ptxbench.tasks.loader import load_spec_file
from ptxbench.tasks.records import (  # re-exported: the records' public home is this module
    ARCHES as ARCHES,
    BASELINES as BASELINES,
    BUILTIN_NAMES as BUILTIN_NAMES,
    DEFAULT_ELEMENT_FACTOR as DEFAULT_ELEMENT_FACTOR,
    DISTRIBUTIONS as DISTRIBUTIONS,
    DTYPE_BYTES as DTYPE_BYTES,
    ElementBound as ElementBound,
    FAMILIES as FAMILIES,
    METRICS as METRICS,
    ROUNDING_FLOOR as ROUNDING_FLOOR,
    Sizes as Sizes,
    SOLUTIONS_DIR as SOLUTIONS_DIR,
    SPECS_DIR as SPECS_DIR,
    TaskSpec as TaskSpec,
    TaskSpecError as TaskSpecError,
    TensorSpec as TensorSpec,
    Tolerance as Tolerance,
)


def load_task(path: Path | str) -> TaskSpec:
    """Load and check one spec file; raises TaskSpecError naming the file and the field."""
    return load_spec_file(Path(path))


# -- the catalogue -----------------------------------------------------------

@cache
def _catalogue() -> dict[str, TaskSpec]:
    tasks: dict[str, TaskSpec] = {}
    for path in sorted(SPECS_DIR.glob("*.toml")):
        task = load_task(path)
        tasks[task.id] = task
    return tasks


def all_tasks() -> list[TaskSpec]:
    """Every spec in tasks/specs/, sorted by id."""
    return [t for _, t in sorted(_catalogue().items())]


def get_task(task_id: str) -> TaskSpec:
    tasks = _catalogue()
    if task_id not in tasks:
        raise KeyError(f"unknown task {task_id!r} (known: {', '.join(sorted(tasks))})")
    return tasks[task_id]


def task_ids() -> list[str]:
    return sorted(_catalogue())

