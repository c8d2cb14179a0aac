"""`ptxbench run`: prompt a model through an OpenAI-compatible endpoint; store and judge every turn.

Running the same command again resumes the run: turns already stored are not
asked again. Several context levels (`--context brief,full`) make one run each.
A run keeps the turn budget it was made with: the same run asked again with
another `--turns` is refused (exit 2), and `--run-name` starts a new one.

`--gpus all|N|0,2,5` (with `--workers-per-gpu`) judges the turns on a pool of GPU workers here,
`--cluster tcp://host:8786` (or `local[:N]`) on a Dask cluster, as `ptxbench eval` does
(docs/scale.md); the rows are written by this process alone either way. Different trajectories
are judged at once; the turns of one trajectory stay in order. Neither applies to `--agent`.

Exit status: 0 when every trajectory finished; 3 when some requests or
judgements failed (what was stored stays; run the command again to resume);
4 when the endpoint refused the run (bad key, unknown model); 2 for a usage
mistake (a `--db` that is not a store included, unless `--create`); 1 when the tool itself failed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ptxbench.cli.conventions import ExitCode, fail, reported, run_reported, say_error


def run_command(
    model: Annotated[str, typer.Option("--model", help="model name the endpoint serves", show_default=False)],
    base_url: Annotated[str, typer.Option("--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1", show_default=False)],
    tasks: Annotated[str, typer.Option("--tasks", help="task ids, comma-separated, or all")] = "all",
    arch: Annotated[Optional[str], typer.Option("--arch", help="only tasks of this arch (sm_90a, sm_100a)")] = None,
    context: Annotated[str, typer.Option("--context", help="none, brief or full; several comma-separated make one run each")] = "none",
    samples: Annotated[int, typer.Option("--samples", min=1, help="trajectories per task")] = 1,
    turns: Annotated[Optional[int], typer.Option("--turns", min=1, help="turns per trajectory (feedback between turns); with --agent, model replies per episode  [default: 1; 8 with --agent]", show_default=False)] = None,
    api_key_env: Annotated[Optional[str], typer.Option("--api-key-env", help="environment variable holding the API key")] = None,
    temperature: Annotated[Optional[float], typer.Option("--temperature", help="sampling temperature (default: the endpoint's)")] = None,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", min=1, help="completion token limit")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1, help="requests in flight")] = 4,
    timeout: Annotated[float, typer.Option("--timeout", min=1, help="seconds per request")] = 600.0,
    retries: Annotated[int, typer.Option("--retries", min=0, help="retries of a request on 429, 5xx, timeouts")] = 6,
    backoff: Annotated[float, typer.Option("--backoff", min=0, help="first retry delay in seconds (doubles, with jitter)")] = 1.0,
    run_name: Annotated[Optional[str], typer.Option("--run-name", help="name of the run (default from model, context, prompts, temperature); the same name resumes")] = None,
    gpu: Annotated[str, typer.Option("--gpu", help="auto, on or off: GPU stages where a GPU of the task's arch is present")] = "auto",
    db_path: Annotated[Optional[Path], typer.Option("--db", help="store (default: $PTXBENCH_DB or the user data folder)")] = None,
    create: Annotated[bool, typer.Option("--create", help="make a new store at --db if there is none (without it a --db that is not a store is refused)")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per event on stdout")] = False,
    agent: Annotated[bool, typer.Option("--agent", help="the model works with tools (assemble, check, time, submit) through the endpoint's function calling (docs/agents.md)")] = False,
    agent_fallback: Annotated[str, typer.Option("--agent-fallback", help="with --agent, on an endpoint without function calling: none (refuse) or turns (the plain multi-turn mode)")] = "none",
    max_tool_calls: Annotated[int, typer.Option("--max-tool-calls", min=1, help="with --agent: tool calls per episode")] = 24,
    max_episode_tokens: Annotated[Optional[int], typer.Option("--max-episode-tokens", min=1, help="with --agent: prompt + completion tokens per episode (as the endpoint reports them)")] = None,
    max_episode_seconds: Annotated[float, typer.Option("--max-episode-seconds", min=1, help="with --agent: wall time per episode")] = 1800.0,
    max_episode_gpu_seconds: Annotated[float, typer.Option("--max-episode-gpu-seconds", min=0, help="with --agent: GPU time the check and time tools may spend per episode")] = 600.0,
    gpus: Annotated[Optional[str], typer.Option("--gpus", help="judge on a pool of GPU workers: all, a count, or indices such as 0,2,5")] = None,
    workers_per_gpu: Annotated[int, typer.Option("--workers-per-gpu", help="workers on each GPU of --gpus (2 or more: timing flagged as shared)")] = 1,
    cluster: Annotated[Optional[str], typer.Option("--cluster", help="judge on a Dask scheduler's workers (tcp://host:8786) or local[:N]; needs ptxbench[cluster]")] = None,
) -> None:
    """Ask a model for kernels, judge each answer, feed the verdict back for up to --turns turns (or, with
    --agent, let it work with the judge's tools until it submits)."""
    from ptxbench.cli.terminal import console
    from ptxbench.services import runs
    from ptxbench.services.batch import SignalStop

    if agent:
        from ptxbench.cli.agent_run import run_agent_command

        if gpus is not None or cluster is not None or workers_per_gpu != 1:
            # An episode's tools judge each call while the model waits for the answer, on this host's worker.
            raise fail("run", "--gpus, --workers-per-gpu and --cluster do not apply to --agent: its tools judge "
                              "each call on this host's GPU worker while the episode waits; leave them out")

        run_agent_command(
            model=model, base_url=base_url, tasks=tasks, arch=arch, context=context, gpu=gpu, api_key_env=api_key_env,
            run_name=run_name, samples=samples, turns=turns or 8, temperature=temperature, max_tokens=max_tokens,
            concurrency=concurrency, timeout=timeout, retries=retries, backoff=backoff, db_path=db_path, create=create,
            as_json=as_json, fallback=agent_fallback, tool_calls=max_tool_calls, tokens=max_episode_tokens,
            wall_s=max_episode_seconds, gpu_s=max_episode_gpu_seconds, plain_printer=_printer, plain_summary=_summary)
        return
    if agent_fallback != "none":
        raise fail("run", "--agent-fallback goes with --agent")
    turns = turns or 1

    err = console(stderr=True)
    out = console()
    with reported("run"):
        configs = runs.run_configs(
            model=model, base_url=base_url, tasks=tasks, arch=arch, context=context, gpu=gpu, api_key_env=api_key_env,
            run_name=run_name, samples=samples, turns=turns, temperature=temperature, max_tokens=max_tokens,
            concurrency=concurrency, timeout_s=timeout, retries=retries, backoff_s=backoff)
        db = runs.open_store(db_path, create=create)
    show = _json_event if as_json else _printer(err)
    stop = SignalStop()  # SIGINT/SIGTERM: no more requests; running judgements write their rows
    with reported("run"):
        judge = runs.parallel_judge(configs, gpus=gpus, workers_per_gpu=workers_per_gpu, cluster=cluster,
                                    progress=show, stop=stop)
    status = ExitCode.OK
    try:
        with stop:
            for config in configs:
                if stop.requested:
                    status = max(status, ExitCode.UNFINISHED)
                    break
                status = max(status, _one_run(db, config, show, out, judge, stop, as_json))
    finally:
        if judge is not None:
            judge.close()
    if status:
        raise typer.Exit(status)


def _one_run(db: Any, config: Any, show: Any, out: Any, judge: Any, stop: Any, as_json: bool) -> ExitCode:
    from ptxbench.services import runs

    with run_reported():
        report = runs.run(db, config, progress=show, judge=judge, stop=stop)
    if not as_json:
        _summary(out, report, config.context)
    if report.aborted:
        say_error("run", f"the endpoint refused the run: {report.aborted}")
        return ExitCode.REFUSED
    return ExitCode.OK if report.finished else ExitCode.UNFINISHED


def _json_event(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event, default=str) + "\n")
    sys.stdout.flush()


def _printer(console: Any) -> Any:
    from ptxbench.engine.categories import Category

    def show(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "start":
            verb = "resuming" if event["resumed"] else "starting"
            console.print(f"{verb} run {event['run_id']}: {event['run_name']} ({event['trajectories']} trajectories)",
                          markup=False, soft_wrap=True)
        elif kind == "turn":
            style = "green" if event["category"] == Category.OK else "red"
            console.print(f"  {event['task']} #{event['index']} turn {event['turn']}: ", end="", markup=False, soft_wrap=True)
            console.print(event["category"], style=style, markup=False, end="")
            console.print(f"  (sample {event['sample_id']}, {event['status']})", style="dim", markup=False, soft_wrap=True)
        elif kind == "failure":
            console.print(f"  {event['task']} #{event['index']} turn {event['turn']}: {event['kind']} failed: "
                          f"{event['message']}", style="yellow", markup=False, soft_wrap=True)
        elif kind == "worker":
            shared = " (shared GPU: timing not clean)" if event.get("shared") else ""
            what = event.get("message") or event.get("device") or ""
            trouble = event["state"] in ("retired", "lost")
            console.print(f"  worker {event['worker']} {event['state']}{': ' + what if what else ''}{shared}",
                          style="yellow" if trouble else "dim", markup=False, soft_wrap=True)
        elif kind == "log":
            trouble = event["level"] in ("warning", "error")
            console.print(f"{event['level']}: {event['message']}", style="yellow" if trouble else "", markup=False,
                          soft_wrap=True)
    return show


def _summary(console: Any, report: Any, level: str) -> None:
    from rich.table import Table

    table = Table(title=f"run {report.run_id} ({level})", title_justify="left", show_edge=False)
    table.add_column("category")
    table.add_column("turns", justify="right")
    for category, n in sorted(report.categories.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(category, str(n))
    console.print(table)
    state = "finished" if report.finished else "unfinished: run the same command again to resume"
    if report.stopped:
        state = (f"stopped ({report.dropped} request(s) dropped, {report.unjudged} stored turn(s) left unjudged): "
                 "run the same command again to resume")
    console.print(f"{report.requests} replies, {report.stored} samples stored, {report.judged} judged, "
                  f"{report.already_done} already in the store; tokens in/out {report.tokens_in}/{report.tokens_out}; "
                  f"{state}", markup=False, soft_wrap=True)
    for failure in report.failures[:20]:
        console.print(f"  {failure['task']} #{failure['index']} turn {failure['turn']}: {failure['kind']}: "
                      f"{failure['message']}", style="yellow", markup=False, soft_wrap=True)
