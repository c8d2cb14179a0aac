"""The task catalogue as the front ends need it: rows to list, and names checked.

Every check raises UsageError with the words a person needs (the known ids), so a command
line, the explorer and a script refuse an unknown task the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ptxbench.services.errors import UsageError

REPO_ROOT = Path(__file__).resolve().parents[1]
CONTEXT_LEVELS = ("none", "brief", "full")


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def task_rows() -> list[dict[str, Any]]:
    """Every task: id, title, arch, requested families, library baseline, expert solution's path."""
    from ptxbench.tasks.spec import all_tasks

    rows = []
    for t in all_tasks():
        folder = t.expert_dir()
        kernel = folder / "kernel.ptx" if folder is not None else None
        rows.append(
            {
                "id": t.id,
                "title": t.title,
                "arch": t.arch,
                "families": list(t.families),
                "baseline": t.baseline,
                "expert": _relative(kernel) if kernel is not None and kernel.is_file() else None,
            }
        )
    return rows


def task_ids() -> list[str]:
    from ptxbench.tasks.spec import task_ids as ids

    return list(ids())


def require_task(task_id: str) -> None:
    """UsageError unless `task_id` names a task."""
    from ptxbench.tasks.spec import get_task

    try:
        get_task(task_id)
    except KeyError as exc:
        raise UsageError(str(exc.args[0] if exc.args else exc)) from None


def require_tasks(ids: list[str] | None) -> list[str] | None:
    """The ids as given (None for none), or UsageError naming the unknown ones and the known."""
    if not ids:
        return None
    known = set(task_ids())
    bad = [t for t in ids if t not in known]
    if bad:
        raise UsageError(f"unknown task {', '.join(bad)} (known: {', '.join(sorted(known))})")
    return list(ids)


def require_context(level: str | None, option: str = "--context") -> None:
    if level is not None and level not in CONTEXT_LEVELS:
        raise UsageError(f"{option} must be none, brief or full")


def tasks_for(spec: str, arch: str | None) -> list[str]:
    """`--tasks all` or a comma-separated list, kept to `arch` when given; UsageError names what is wrong."""
    from ptxbench.tasks.spec import all_tasks, get_task

    known = task_ids()
    if spec.strip() == "all":
        chosen = [t.id for t in all_tasks() if arch is None or t.arch == arch]
    else:
        chosen = [t.strip() for t in spec.split(",") if t.strip()]
        unknown = [t for t in chosen if t not in known]
        if unknown:
            raise UsageError(f"unknown task(s): {', '.join(unknown)} (known: {', '.join(known)})")
        if arch is not None:
            wrong = [t for t in chosen if get_task(t).arch != arch]
            if wrong:
                raise UsageError(f"not {arch} tasks: {', '.join(wrong)}")
    if not chosen:
        raise UsageError(f"no tasks for {arch}")
    return list(dict.fromkeys(chosen))
