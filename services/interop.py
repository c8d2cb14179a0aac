"""`ptxbench import`: model output made elsewhere, in any format PTXBench reads, into a store.

The formats and what each keeps are models/interop.py's; what is written, skipped, in conflict
or left unjudged is models/importer.py's. This checks the request before any store is opened (a
bad `--gpu`, `--format`, `--context`, `--arch` or `--map`, a missing path, a file that is an
SQLite database) and opens the store the import writes.
"""

from __future__ import annotations

from pathlib import Path

from ptxbench.models.importer import ON_CHANGE, ImportFileError, ImportReport, Progress, import_file
from ptxbench.models.interop import FORMATS, Options, arch_of
from ptxbench.services.catalogue import CONTEXT_LEVELS
from ptxbench.services.errors import UsageError
from ptxbench.services.hardware import gpu_wanted
from ptxbench.services.runs import open_store

__all__ = ["FORMATS", "ON_CHANGE", "ImportFileError", "ImportReport", "import_path", "task_map"]


def task_map(pairs: list[str] | tuple[str, ...]) -> dict[str, str]:
    """`DEFINITION=TASK` pairs → a map; UsageError for a pair that is not one or a task that does not exist."""
    from ptxbench.tasks.spec import task_ids

    known = set(task_ids())
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, task = pair.partition("=")
        if not sep or not name.strip() or not task.strip():
            raise UsageError(f"--map {pair!r}: give DEFINITION=TASK")
        if task.strip() not in known:
            raise UsageError(f"--map {pair!r}: no task {task.strip()!r} (ptxbench tasks lists them)")
        out[name.strip()] = task.strip()
    return out


def import_path(
    path: Path,
    *,
    db_path: Path | None = None,
    create: bool = False,
    judge: bool = True,
    gpu: str = "auto",
    progress: Progress | None = None,
    fmt: str | None = None,
    on_change: str = "conflict",
    skip_bad: bool = False,
    model: str | None = None,
    run: str | None = None,
    context: str | None = None,
    arch: str | None = None,
    maps: list[str] | tuple[str, ...] = (),
) -> ImportReport:
    """Check, store and (by default) judge what `path` holds. UsageError for a bad request; ImportFileError
    lists every bad line, and nothing is written then; StoreError for a store that will not open, or a
    `db_path` that is not a store (unless `create`)."""
    from ptxbench.db.files import database_reason
    from ptxbench.db.store import default_store_path

    if gpu not in ("auto", "on", "off"):
        raise UsageError("--gpu: use auto, on or off")
    if fmt is not None and fmt not in FORMATS:
        raise UsageError(f"--format: use one of {', '.join(FORMATS)}")
    if on_change not in ON_CHANGE:
        raise UsageError(f"--on-change: use one of {', '.join(ON_CHANGE)}")
    if context is not None and context not in CONTEXT_LEVELS:
        raise UsageError(f"--context: use one of {', '.join(CONTEXT_LEVELS)}")
    chosen_arch = None
    if arch is not None:
        chosen_arch = arch_of(arch)
        if chosen_arch is None:
            raise UsageError(f"--arch {arch!r}: use sm_90a or sm_100a (or hopper, blackwell)")
    mapping = task_map(maps)
    if not path.exists():
        raise UsageError(f"{path}: no such file or folder")
    if not path.is_dir():
        reason = database_reason(path, stores=[db_path if db_path is not None else default_store_path()])
        if reason:
            raise UsageError(f"{path}: not a JSONL file to import: {reason}")
    try:
        use_gpu = gpu_wanted(gpu) if judge else False
    except UsageError as exc:
        raise UsageError(f"--gpu: {exc}") from None
    options = Options(model=model, run=run, context=context, arch=chosen_arch, task_map=mapping)
    return import_file(
        open_store(db_path, create=create),
        path,
        judge=judge,
        gpu=use_gpu,
        progress=progress,
        fmt=fmt,
        on_change=on_change,
        skip_bad=skip_bad,
        options=options,
    )
