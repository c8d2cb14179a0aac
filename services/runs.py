"""Model runs against an OpenAI-compatible endpoint, and imports of output made elsewhere.

A run (models/generate.py) stores every raw reply before anything else happens to it, judges
each turn and feeds the verdict back for the next; the same request again resumes. Several
context levels make one run each. An import (models/importer.py) checks a whole JSONL file
before writing any of it, then judges what it stored.

`--gpus`, `--workers-per-gpu` and `--cluster` judge a run's turns on the backend `ptxbench eval`
uses (`parallel_judge`, services/turn_judging.py); the run still writes every row itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlite_utils

from ptxbench.models.client import EndpointError
from ptxbench.models.generate import Progress, RunConfig, RunMismatch, RunReport, RunStop, run_model
from ptxbench.services.catalogue import CONTEXT_LEVELS, tasks_for
from ptxbench.services.errors import UsageError
from ptxbench.services.hardware import gpu_wanted

if TYPE_CHECKING:
    from ptxbench.services.turn_judging import ParallelJudge

__all__ = [
    "EndpointError",
    "RunMismatch",
    "RunReport",
    "RunStop",
    "Progress",
    "open_store",
    "parallel_judge",
    "run_configs",
    "run",
]


def open_store(path: Path | None, *, create: bool = False) -> sqlite_utils.Database:
    """The store a run or an import writes: the default store (created and seeded on first use), or
    `path`, which must already be a store unless `create` (NoStore, a StoreError, says so)."""
    from ptxbench.db.seed import open_for_writing

    return open_for_writing(path, create=create)


def run_configs(
    *,
    model: str,
    base_url: str,
    tasks: str = "all",
    arch: str | None = None,
    context: str = "none",
    gpu: str = "auto",
    api_key_env: str | None = None,
    run_name: str | None = None,
    **options: Any,
) -> list[RunConfig]:
    """One RunConfig per context level (`context` is comma-separated). UsageError for a bad level,
    task list, `--gpu` mode, missing key variable, or one run name for several runs. `options` are
    the rest of RunConfig's fields (samples, turns, temperature …)."""
    levels, task_list, use_gpu = checked_request(
        tasks=tasks, arch=arch, context=context, gpu=gpu, api_key_env=api_key_env, run_name=run_name
    )
    return [
        RunConfig(
            model=model,
            base_url=base_url,
            tasks=tuple(task_list),
            context=level,
            api_key_env=api_key_env,
            run_name=run_name,
            gpu=use_gpu,
            **options,
        )
        for level in levels
    ]


def checked_request(
    *, tasks: str, arch: str | None, context: str, gpu: str, api_key_env: str | None, run_name: str | None
) -> tuple[list[str], list[str], bool]:
    """What every model run checks first (plain and agent alike): (context levels, task ids, whether
    the GPU stages run). UsageError names the option that is wrong."""
    levels = [c.strip() for c in context.split(",") if c.strip()]
    if not levels or any(c not in CONTEXT_LEVELS for c in levels):
        raise UsageError(f"--context: {context!r}: use none, brief, full (comma-separated)")
    if gpu not in ("auto", "on", "off"):
        raise UsageError("--gpu: use auto, on or off")
    if api_key_env and api_key_env not in os.environ:
        raise UsageError(f"--api-key-env: the environment variable {api_key_env} is not set")
    if run_name and len(levels) > 1:
        raise UsageError("--run-name: one name cannot name several runs; give one context")
    try:
        task_list = tasks_for(tasks, arch)
    except UsageError as exc:
        raise UsageError(f"{'--arch' if str(exc).startswith('no tasks') else '--tasks'}: {exc}") from None
    try:
        use_gpu = gpu_wanted(gpu)
    except UsageError as exc:
        raise UsageError(f"--gpu: {exc}") from None
    return levels, task_list, use_gpu


def parallel_judge(
    configs: list[RunConfig],
    *,
    gpus: str | None = None,
    workers_per_gpu: int = 1,
    cluster: str | None = None,
    progress: Progress | None = None,
    stop: RunStop | None = None,
) -> ParallelJudge | None:
    """What `--gpus` / `--workers-per-gpu` / `--cluster` ask of the runs `configs`: a judge on a pool or a
    cluster, its workers started, or None (judging on this process's own worker). UsageError for options
    that do not fit, ToolError when no worker could be had. The caller closes it after the last run; `stop` is
    the one the runs are given (the judge withdraws and waits for its jobs by it)."""
    from ptxbench.services.parallel import make_backend
    from ptxbench.services.turn_judging import ParallelJudge
    from ptxbench.tasks.spec import get_task

    gpu = any(c.gpu for c in configs)
    archs = {get_task(t).arch for c in configs for t in c.tasks}
    backend = make_backend(
        archs,
        gpus=gpus,
        workers_per_gpu=workers_per_gpu,
        cluster=cluster,
        static_only=not gpu,
        without_gpu="a run without the GPU stages (--gpu off, or no GPU here)",
    )
    if backend is None:
        return None
    judge = ParallelJudge(backend, gpu=gpu, progress=progress, stop=stop)
    judge.start(archs)
    return judge


def run(
    db: sqlite_utils.Database,
    config: RunConfig,
    progress: Progress | None = None,
    *,
    judge: ParallelJudge | None = None,
    stop: RunStop | None = None,
) -> RunReport:
    """One run: ask, store, judge, feed back; on `judge`'s workers when given (`parallel_judge`), until `stop`
    (services/batch.SignalStop: SIGINT/SIGTERM). Raises RunMismatch (a resumed run made with other prompts, or
    with another turn budget once it has stored turns),
    EndpointError (the endpoint refused the run), StoreError."""
    return run_model(db, config, progress=progress, judge=judge, stop=stop)
