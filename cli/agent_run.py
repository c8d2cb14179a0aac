"""`ptxbench run --agent`: the model works on each task with the judge's tools (docs/agents.md).

Exit status as `ptxbench run`: 0 when every episode finished; 3 when a request or a judgement
failed for good (run the same command again to resume); 4 when the endpoint refused the run, an
endpoint without function calling included (unless `--agent-fallback turns`); 2 for a usage
mistake; 1 when the tool failed. SIGTERM, SIGHUP and SIGINT stop the run: the episodes under way
are marked `ended: interrupted` (no sample), a submitted kernel whose judgement was cut short stays
unjudged, and the same command resumes both (exit 3).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from ptxbench.cli.conventions import ExitCode, fail, reported, run_reported, say_error


def run_agent_command(*, db_path: Path | None, create: bool, as_json: bool, fallback: str, timeout: float, backoff: float,
                      plain_printer: Any, plain_summary: Any, **options: Any) -> None:
    """`plain_printer` and `plain_summary` show a plain run's events and summary (cli/run.py's), for
    the fallback to the multi-turn mode."""
    from ptxbench.cli.terminal import console
    from ptxbench.services import agent, runs

    err = console(stderr=True)
    out = console()
    with reported("run"):
        if fallback not in agent.FALLBACKS:
            raise fail("run", f"--agent-fallback: use {' or '.join(agent.FALLBACKS)}")
        configs = agent.agent_configs(timeout_s=timeout, backoff_s=backoff, **options)
        db = runs.open_store(db_path, create=create)
    status = ExitCode.OK
    for config in configs:
        show = _json_event if as_json else _printer(err, plain_printer(err))
        try:
            with run_reported(), _stop_as_interrupt():
                outcome = agent.run(db, config, fallback=fallback, progress=show)
        except KeyboardInterrupt:
            say_error("run", "stopped: the episodes under way are marked interrupted; run the same command again "
                             "to resume")
            raise typer.Exit(ExitCode.UNFINISHED) from None
        report = outcome.report or outcome.fallback
        assert report is not None
        if outcome.fallback is not None:
            err.print("ptxbench run: the endpoint does not support function calling; ran the plain multi-turn mode "
                      "instead (--agent-fallback turns)", style="yellow", markup=False, soft_wrap=True)
        if not as_json:
            _summary(out, outcome, config.context, plain_summary)
        if report.aborted:
            say_error("run", f"the endpoint refused the run: {report.aborted}")
            status = max(status, ExitCode.REFUSED)
        elif not report.finished:
            status = max(status, ExitCode.UNFINISHED)
    if status:
        raise typer.Exit(status)


@contextmanager
def _stop_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP as SIGINT, which asyncio turns into a cancellation of the run's tasks: each
    episode under way then closes itself as interrupted (models/agent.py) instead of staying `running`."""
    def as_sigint(_sig: int, _frame: Any) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    previous = {sig: signal.signal(sig, as_sigint) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _json_event(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event, default=str) + "\n")
    sys.stdout.flush()


def _printer(console: Any, fallback_printer: Any) -> Any:
    def show(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "start" and event.get("agent"):
            verb = "resuming" if event["resumed"] else "starting"
            console.print(f"{verb} agent run {event['run_id']}: {event['run_name']} ({event['episodes']} episodes)",
                          markup=False, soft_wrap=True)
        elif kind == "step":
            style = "red" if str(event["status"]).startswith("error") else "dim"
            what = f" → {event['category']}" if event.get("category") else ""
            console.print(f"  {event['task']} #{event['index']} reply {event['turn']}: {event['tool']}: "
                          f"{event['status']}{what}", style=style, markup=False, soft_wrap=True)
        elif kind == "episode":
            console.print(f"  {event['task']} #{event['index']}: {event['status']} after {event['turns']} replies and "
                          f"{event['tool_calls']} tool calls (sample {event['sample_id']})", markup=False, soft_wrap=True)
        elif kind == "judged":
            style = "green" if event["category"] == "ok" else "red"
            console.print(f"  {event['task']} #{event['index']}: judged ", end="", markup=False)
            console.print(event["category"], style=style, markup=False, end="")
            console.print(f"  ({event['status']})", style="dim", markup=False)
        elif kind == "failure" and "turn" not in event:
            console.print(f"  {event['task']} #{event['index']}: {event['kind']} failed: {event['message']}",
                          style="yellow", markup=False, soft_wrap=True)
        else:
            fallback_printer(event)
    return show


def _summary(console: Any, outcome: Any, level: str, plain_summary: Any) -> None:
    if outcome.report is None:
        plain_summary(console, outcome.fallback, level)
        return
    from rich.table import Table

    report = outcome.report
    table = Table(title=f"agent run {report.run_id} ({level})", title_justify="left", show_edge=False)
    table.add_column("verdict of the submitted kernel")
    table.add_column("episodes", justify="right")
    for category, n in sorted(report.categories.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(category, str(n))
    console.print(table)
    endings = ", ".join(f"{n} {why}" for why, n in sorted(report.endings.items(), key=lambda kv: -kv[1])) or "none"
    cost = f", cost {report.cost:.4g}" if report.cost is not None else ""
    state = "finished" if report.finished else "unfinished: run the same command again to resume"
    console.print(f"{report.episodes} episodes run, {report.already_done} already in the store; {report.requests} "
                  f"replies, {report.tool_calls} tool calls; tokens in/out {report.tokens_in}/{report.tokens_out}{cost}; "
                  f"endings: {endings}; {state}", markup=False, soft_wrap=True)
    for failure in report.failures[:20]:
        console.print(f"  {failure['task']} #{failure['index']}: {failure['kind']}: {failure['message']}",
                      style="yellow", markup=False, soft_wrap=True)
