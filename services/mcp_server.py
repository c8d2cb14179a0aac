"""`ptxbench mcp`: the judge's tools over the Model Context Protocol, for agents PTXBench does not drive.

An external agent (a coding assistant that speaks MCP) connects over stdio, or over streamable
HTTP or SSE on 127.0.0.1 only, and gets the same tools as `ptxbench run --agent`
(models/agent_tools.py: the workspace file and the judge) plus two to read the work: `list_tasks`
and `describe_task` (the task's prompt at the server's context level: train sizes and the
headline size, never the held-out ones). Every episode tool names its task.

Sessions. Each client is its own session, keyed by its transport: the one client of a stdio
server, the `Mcp-Session-Id` of a streamable-HTTP session, the `session_id` of an SSE stream. A
session has its own run, its own open episode (and workspace file) per task, its own rate limit
and its own GPU budget. HTTP sessions need the initialize handshake: a request in the stateless
2026-07-28 protocol has no session to belong to and is refused, which makes the SDK's clients fall
back to the handshake by themselves.

Names. A session's run belongs to the model row `NAME (mcp)` (kind `agent`), NAME being
`--agent-name` or else the client's own name: whatever a client calls itself, its kernels never
land in the samples of an existing model such as `expert` or `gpt-x (agent)`.

What is recorded: the first episode call for a task opens an episode of the session's run, each
call is a step, and `submit` ends the episode with its kernel as a sample judged in full. The calls
of one session on one task run one at a time (their steps in order, one `submit` ending one
episode; a later call opens the next); calls on other tasks, and other sessions, go on meanwhile.
The GPU budget is read and charged under the GPU lock, so concurrent calls never overspend it.
When a session ends, an episode left open is closed: without a kernel (`no_candidate`, "the session
closed without a submit") when the client ended the session (stdio's end, an HTTP DELETE, an SSE
stream closed); `ended: interrupted (…)` with no sample when the session expired or the server
was stopped (SIGTERM, SIGINT, SIGHUP), for then the agent was cut off. The held-out results stay
in the store: the answer to `submit` is the sample's id and its verdict's category.

Limits per session: `rate` episode calls a minute (a call over it is refused at once with the
wait, never queued; reading the file is free) and `gpu_budget_s` of GPU time for `check` and
`time` together (past it they answer `skipped: …`). Every answer says what is left. Over HTTP an
optional bearer token (`--auth-token-env`) keeps other local users out.

This module is the server's state and needs no SDK; services/mcp_app.py binds it to the SDK (`mcp`,
imported only when the server is built, so the rest of PTXBench works without it): the tools'
schemas, the transports' sessions, the HTTP front and the signals.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.db.judgement import add_judgement, evaluation_records
from ptxbench.db.queries import get_model
from ptxbench.db.records import Run, Sample
from ptxbench.db.store import now_iso, write_transaction
from ptxbench.db.trajectories import (
    ENDED_PREFIX,
    SUBMITTED,
    Episode,
    Step,
    add_step,
    finish_episode,
    next_step_number,
    run_episodes,
    start_episode,
    update_episode,
)
from ptxbench.db.writes import add_evaluation, add_sample, create_run, finish_run, get_or_create_model
from ptxbench.models.agent_tools import (
    GpuAccess,
    GpuBudget,
    JudgeTools,
    ToolOutcome,
    recorded_arguments,
)
from ptxbench.models.judging import JudgeFailed, candidate_of, judge_sample
from ptxbench.services.catalogue import CONTEXT_LEVELS, tasks_for
from ptxbench.services.errors import UsageError

AGENT = "ptxbench mcp"
EVALUATION_SOURCE = "ptxbench mcp"
HOST = "127.0.0.1"  # the HTTP transports listen on this machine only
TRANSPORTS = ("stdio", "streamable-http", "sse")
SERVER_NAME = "ptxbench"
MODEL_SUFFIX = " (mcp)"
MAX_CLIENT_NAME = 64
MIN_TOKEN_CHARS = 16
PROGRESS_EVERY_S = 5.0
SHUTDOWN_GRACE_S = 5
# How a session ended: the client's own end leaves a no_candidate sample; the others interrupt.
CLOSED, EXPIRED, STOPPED = "closed", "expired", "stopped"
CLOSED_STATUS = ENDED_PREFIX + "the session closed without a submit"
INTERRUPTED = ENDED_PREFIX + "interrupted"


def server_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from ptxbench.engine.pipeline import ENGINE_VERSION

    try:
        package = version("ptxbench")
    except PackageNotFoundError:
        package = "unknown"
    return f"{package} (engine {ENGINE_VERSION})"


@dataclass(frozen=True)
class McpSettings:
    db_path: Path | None = None
    create: bool = False  # make a new store at db_path when there is none
    agent_name: str | None = None  # the model row's name before its suffix; None: the client's own name
    context: str = "none"
    tasks: tuple[str, ...] = ()
    gpu: bool = False
    gpu_archs: tuple[str, ...] = ()
    rate_per_minute: int = 30
    gpu_budget_s: float = 600.0
    session_idle_s: float = 1800.0  # an HTTP session with no request for this long expires
    auth_token: str | None = field(default=None, repr=False)  # HTTP requests must carry it as a bearer token

    def __post_init__(self) -> None:
        if self.context not in CONTEXT_LEVELS:
            raise UsageError(f"--context: use {', '.join(CONTEXT_LEVELS)}")
        if self.rate_per_minute < 1:
            raise UsageError("--rate: at least one call a minute")
        if self.gpu_budget_s < 0:
            raise UsageError("--gpu-seconds: not negative")
        if self.session_idle_s <= 0:
            raise UsageError("--session-idle: more than 0 seconds")
        if self.auth_token is not None and len(self.auth_token) < MIN_TOKEN_CHARS:
            raise UsageError(f"the bearer token must be at least {MIN_TOKEN_CHARS} characters")


def settings_for(
    *,
    db_path: Path | None,
    agent_name: str | None,
    context: str,
    tasks: str,
    gpu: str,
    rate_per_minute: int,
    gpu_budget_s: float,
    create: bool = False,
    auth_token_env: str | None = None,
    session_idle_s: float = 1800.0,
) -> McpSettings:
    """Settings from the command line's words; UsageError for a bad one, NoStore (a StoreError) for a
    `db_path` that is not a store (unless `create`). The bearer token is read from the environment
    variable `auth_token_env` names (a command line is visible to every local user)."""
    from ptxbench.db.access import require_store
    from ptxbench.services.hardware import gpu_archs, gpu_wanted

    if db_path is not None and not create:
        require_store(db_path)
    token = None
    if auth_token_env is not None:
        token = os.environ.get(auth_token_env)
        if not token:
            raise UsageError(f"--auth-token-env: the variable {auth_token_env} is not set")
    try:
        use_gpu = gpu_wanted(gpu)
    except UsageError as exc:
        raise UsageError(f"--gpu: {exc}") from None
    try:
        task_list = tuple(tasks_for(tasks, None))
    except UsageError as exc:
        raise UsageError(f"--tasks: {exc}") from None
    return McpSettings(
        db_path=db_path,
        create=create,
        agent_name=agent_name,
        context=context,
        tasks=task_list,
        gpu=use_gpu,
        gpu_archs=tuple(gpu_archs() or ()) if use_gpu else (),
        rate_per_minute=rate_per_minute,
        gpu_budget_s=gpu_budget_s,
        session_idle_s=session_idle_s,
        auth_token=token,
    )


def model_name_for(name: str | None) -> str:
    """The store's name for an MCP agent: its name made printable and short, then ` (mcp)`, so no
    client can name itself into another model's row."""
    text = "".join(ch if ch.isprintable() else " " for ch in (name or "")[: MAX_CLIENT_NAME * 4])
    text = " ".join(text.split())[:MAX_CLIENT_NAME].strip() or "mcp-client"
    return text + MODEL_SUFFIX


class RateLimit:
    """A token bucket: `rate` calls a minute, as a burst of `rate` at most."""

    def __init__(self, rate_per_minute: int, clock: Any = time.monotonic) -> None:
        self.capacity = float(rate_per_minute)
        self.tokens = float(rate_per_minute)
        self.per_s = rate_per_minute / 60.0
        self.clock = clock
        self.last = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.per_s)
        self.last = now

    def take(self) -> float:
        """0 when the call may go ahead (and is counted), else the seconds until one may."""
        self._refill()
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.per_s

    def left(self) -> int:
        self._refill()
        return int(self.tokens)


@dataclass
class _Open:
    row: Episode
    tools: JudgeTools
    started: float = field(default_factory=time.perf_counter)
    closed: bool = False


class Session:
    """One client's session: its run, its open episode per task, its limits. Used on the server's
    event loop only; `lock(task)` serialises the calls on one task."""

    def __init__(self, settings: McpSettings, db: Any, key: str, client_name: str | None) -> None:
        self.settings = settings
        self.db = db
        self.key = key
        self.client_name = model_name_for(client_name).removesuffix(MODEL_SUFFIX)
        self.run: Run | None = None
        self.open: dict[str, _Open] = {}
        self.rate = RateLimit(settings.rate_per_minute)
        self.gpu = GpuBudget(settings.gpu_budget_s)
        self.locks: dict[str, Any] = {}
        self.ended: str | None = None
        self.started = now_iso()

    @property
    def model_name(self) -> str:
        return model_name_for(self.settings.agent_name or self.client_name)

    @property
    def source(self) -> str:
        return f"agent:{self.model_name} via {AGENT} (client {self.client_name})"

    def lock(self, task_id: str) -> Any:
        import anyio

        found = self.locks.get(task_id)
        if found is None:
            found = self.locks[task_id] = anyio.Lock()
        return found

    def left(self) -> dict[str, Any]:
        """What this session may still spend, as every answer says it."""
        return {"calls_this_minute": self.rate.left(), "gpu_seconds": round(self.gpu.left(), 1)}

    def _run(self) -> Run:
        if self.run is None:
            name = self.model_name
            found = get_model(self.db, name)
            if found is not None and (found.kind != "agent" or AGENT not in (found.source or "")):
                raise UsageError(
                    f"the model name {name!r} belongs to another source in this store; "
                    "start the server with another --agent-name"
                )
            model = get_or_create_model(self.db, name, kind="agent", source=self.source)
            assert model.id is not None
            self.run = create_run(
                self.db,
                Run(
                    model_id=model.id,
                    name=f"{name} · mcp · {self.settings.context} · {self.started} · {self.key[-12:]}",
                    source=self.source,
                    context_level=self.settings.context,
                    prompt_version=_prompt_version(),
                    params={
                        "mode": "mcp",
                        "client": self.client_name,
                        "rate_per_minute": self.settings.rate_per_minute,
                        "gpu_budget_s": self.settings.gpu_budget_s,
                        "gpu": self.settings.gpu,
                        "tasks": list(self.settings.tasks),
                        "server": server_version(),
                    },
                ),
            )
        return self.run

    def episode(self, task_id: str) -> _Open:
        """The task's open episode, or a new one (with an empty workspace file)."""
        found = self.open.get(task_id)
        if found is not None:
            return found
        from ptxbench.tasks.spec import get_task

        run = self._run()
        assert run.id is not None
        index = sum(1 for e in run_episodes(self.db, run.id) if e.task_id == task_id)
        budgets = {"rate_per_minute": self.settings.rate_per_minute, "gpu_s": self.settings.gpu_budget_s}
        row = start_episode(
            self.db,
            Episode(
                run_id=run.id, task_id=task_id, sample_index=index, agent=AGENT, source=self.source, budgets=budgets
            ),
        )
        tools = JudgeTools(get_task(task_id), GpuAccess(self.settings.gpu_archs, self.settings.gpu), budget=self.gpu)
        self.open[task_id] = found = _Open(row, tools)
        return found

    def record(self, ep: _Open, name: str, arguments: dict[str, Any], out: ToolOutcome) -> None:
        ep.row.tool_calls += 1
        ep.row.gpu_s = round(ep.row.gpu_s + out.gpu_s, 3)
        ep.row.wall_s = round(time.perf_counter() - ep.started, 3)
        add_step(
            self.db,
            Step(
                episode_id=ep.row.id,  # type: ignore[arg-type]
                step=next_step_number(self.db, ep.row.id),  # type: ignore[arg-type]
                kind="tool",
                tool=name,
                arguments=recorded_arguments(arguments),  # bounded: a note instead of arguments over the caps
                result=out.result,
                status=out.status,
                seconds=round(out.seconds, 4),
                gpu_s=round(out.gpu_s, 4) if out.gpu_s else None,
            ),
        )
        update_episode(self.db, ep.row)

    def end(self, task_id: str, sample: Sample | None, status: str) -> Episode:
        ep = self.open.pop(task_id)
        ep.closed = True
        ep.row.wall_s = round(time.perf_counter() - ep.started, 3)
        return finish_episode(self.db, ep.row, status, sample.id if sample is not None else None)

    def close(self, how: str, why: str = "") -> None:
        """The session is over. An open episode ends without a kernel when the client ended the session
        (`closed`), else is interrupted with no sample; the run is finished either way."""
        if self.ended is not None:
            return
        self.ended = how
        for task_id, ep in list(self.open.items()):
            if how == CLOSED:
                sample = add_sample(
                    self.db,
                    Sample(
                        task_id=task_id,
                        language="none",
                        source=self.source,
                        response="",
                        run_id=self.run.id if self.run else None,
                        sample_index=ep.row.sample_index,
                    ),
                )
                row = self.end(task_id, sample, CLOSED_STATUS)
                _no_submit(self.db, ep.tools.spec, sample, row)
            else:
                self.end(task_id, None, f"{INTERRUPTED} ({why or how})")
        if self.run is not None:
            finish_run(self.db, self.run.id)  # type: ignore[arg-type]


def _prompt_version() -> str:
    from ptxbench.tasks.prompts import PROMPT_VERSION

    return PROMPT_VERSION


def _no_submit(db: Any, spec: Any, sample: Sample, row: Episode) -> None:
    from ptxbench.engine.static import StaticVerdict

    reason = f"the agent never called submit ({row.status.removeprefix(ENDED_PREFIX)})"
    verdict = StaticVerdict(
        category="no_candidate",
        stage="extract",
        arch=spec.arch,
        task_id=spec.id,
        require=list(spec.families),
        evidence=reason,
        extract_evidence={"reason": reason},
    )
    with write_transaction(db):
        judged = evaluation_records(verdict, sample.id, EVALUATION_SOURCE, {"agent": {"episode_id": row.id}})  # type: ignore[arg-type]
        add_evaluation(db, judged.evaluation, judged.measurements)


Progress = Callable[[float, str], Awaitable[None]]


class Judge:
    """The server's state over every session: the store and the sessions by key. Everything here runs on
    the server's event loop (the tools' work goes to threads), so the store has one writer."""

    def __init__(self, settings: McpSettings) -> None:
        from ptxbench.db.seed import open_for_writing

        self.settings = settings
        self.db = open_for_writing(settings.db_path, create=settings.create)
        self.sessions: dict[str, Session] = {}
        self.ended_by_client: set[str] = set()  # HTTP sessions whose client sent DELETE
        self.stopping: str | None = None

    def session(self, key: str, client_name: str | None) -> Session:
        found = self.sessions.get(key)
        if found is None:
            if self.stopping:
                raise UsageError("the server is stopping")
            found = self.sessions[key] = Session(self.settings, self.db, key, client_name)
        return found

    def end_session(self, key: str, how: str, why: str = "") -> None:
        session = self.sessions.pop(key, None)
        self.ended_by_client.discard(key)
        if session is not None:
            session.close(how, why)

    async def connection_closed(self, key: str) -> None:
        """An HTTP or SSE session's connection ended: by its client, by expiry, or by the server's stop."""
        if key in self.ended_by_client or key.startswith("sse:"):
            self.end_session(key, CLOSED)
        elif self.stopping:
            self.end_session(key, STOPPED, self.stopping)
        else:
            self.end_session(key, EXPIRED, f"the session expired after {self.settings.session_idle_s:g} s idle")

    def stop(self, why: str) -> None:
        """The server is stopping: every open episode is interrupted."""
        self.stopping = self.stopping or why
        self.close()

    def close(self) -> None:
        how = STOPPED if self.stopping else CLOSED
        for key in list(self.sessions):
            self.end_session(key, how, self.stopping or "")

    # -- what the tools do ---------------------------------------------------------------------

    def list_tasks(self) -> list[dict[str, Any]]:
        from ptxbench.tasks.spec import get_task

        out = []
        for task_id in self.settings.tasks:
            spec = get_task(task_id)
            gpu = GpuAccess(self.settings.gpu_archs, self.settings.gpu).skipped(spec.arch)
            out.append(
                {
                    "task": spec.id,
                    "title": spec.title,
                    "arch": spec.arch,
                    "families": list(spec.families),
                    "gpu": gpu or "ready: check and time run on a GPU here",
                }
            )
        return out

    def describe_task(self, task_id: str) -> str:
        from ptxbench.models.agent_context import agent_system, agent_user, tools_note
        from ptxbench.tasks.prompts import build_prompt
        from ptxbench.tasks.spec import get_task

        spec = get_task(self._allowed(task_id))
        prompt = build_prompt(spec, self.settings.context)
        limits = (
            f"{self.settings.rate_per_minute} episode calls a minute and {self.settings.gpu_budget_s:g} GPU "
            "seconds for check and time, for this session"
        )
        return (
            f"{agent_system(prompt)}\n\n{agent_user(prompt)}{tools_note(budget_line=limits)}\n\n"
            f"Every tool call names the task: task={spec.id!r}. Each task has its own workspace file."
        )

    def _allowed(self, task_id: str) -> str:
        if not isinstance(task_id, str) or task_id not in self.settings.tasks:
            shown = repr(task_id) if isinstance(task_id, str) and len(task_id) <= 80 else "of that name"
            raise UsageError(f"no task {shown} here; list_tasks names them")
        return task_id

    async def call(
        self, session: Session, name: str, task_id: str, arguments: dict[str, Any], progress: Progress | None = None
    ) -> dict[str, Any]:
        """One episode call: counted against the rate (reading the file is free), recorded as a step, the
        episode ended by submit. The calls of one session on one task take turns."""
        self._allowed(task_id)
        if session.ended is not None:
            raise UsageError("this session has ended")
        if name != "read_file":
            wait = session.rate.take()
            if wait > 0:
                raise UsageError(
                    f"rate limit: at most {self.settings.rate_per_minute} calls a minute; try again in {wait:.1f} s"
                )
        async with session.lock(task_id):
            if session.ended is not None:
                raise UsageError("this session has ended")
            ep = session.episode(task_id)
            out = await _in_thread(functools.partial(ep.tools.call, name, arguments), name, progress)
            if ep.closed:  # the session ended while the call ran: its episode is closed, nothing more is written
                raise UsageError("the session ended while this call ran")
            session.record(ep, name, arguments, out)
            if out.status.startswith("error: "):
                raise UsageError(out.result.get("error") or out.status)
            if out.submission is None:
                return {**out.result, "budget_left": session.left()}
            return await self._submit(session, ep, task_id, out)

    async def _submit(self, session: Session, ep: _Open, task_id: str, out: ToolOutcome) -> dict[str, Any]:
        import anyio

        sub = out.submission
        assert sub is not None
        sample = add_sample(
            self.db,
            Sample(
                task_id=task_id,
                language=sub.language,
                code=sub.code,
                manifest=sub.manifest,
                response=sub.stored_response(),  # the code is the sample's own; the step keeps the call
                source=session.source,
                run_id=session._run().id,
                sample_index=ep.row.sample_index,
                latency_s=round(time.perf_counter() - ep.started, 3),
            ),
        )
        row = session.end(task_id, sample, SUBMITTED)
        spec = ep.tools.spec
        # A stored kernel is judged even if its client goes away meanwhile.
        with anyio.CancelScope(shield=True):
            try:
                result = await anyio.to_thread.run_sync(_judge_locked, candidate_of(sample), spec, self.settings.gpu)
            except JudgeFailed as exc:
                return {
                    "submitted": True,
                    "sample_id": sample.id,
                    "episode_id": row.id,
                    "judged": False,
                    "error": f"the kernel is stored but the judge failed on it: {exc}",
                }
            evidence = {"agent": {"episode_id": row.id, "status": row.status, "tool_calls": row.tool_calls}}
            evaluation = add_judgement(self.db, result, sample.id, EVALUATION_SOURCE, evidence)  # type: ignore[arg-type]
        return {
            "submitted": True,
            "sample_id": sample.id,
            "episode_id": row.id,
            "status": evaluation.status,
            "category": evaluation.category,
            "note": "judged in full; the held-out sizes' results stay in the store; a later call on this task "
            "opens a new episode with an empty file",
            "budget_left": session.left(),
        }


async def _in_thread(work: Callable[[], ToolOutcome], name: str, progress: Progress | None) -> ToolOutcome:
    """`work` on a thread, with a progress notification every few seconds while it runs. A cancelled
    caller (its client gone) stops waiting; the thread finishes on its own."""
    import anyio

    if progress is None:
        return await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    answer: list[ToolOutcome] = []
    async with anyio.create_task_group() as tg:

        async def beat() -> None:
            started = time.monotonic()
            while True:
                await anyio.sleep(PROGRESS_EVERY_S)
                elapsed = time.monotonic() - started
                try:
                    await progress(elapsed, f"{name}: running for {elapsed:.0f} s")
                except Exception:  # a client that cannot take notifications still gets its answer
                    return

        tg.start_soon(beat)
        answer.append(await anyio.to_thread.run_sync(work, abandon_on_cancel=True))
        tg.cancel_scope.cancel()
    return answer[0]


def _judge_locked(extracted: Any, spec: Any, gpu: bool) -> Any:
    from ptxbench.models.agent_tools import GPU_LOCK

    with GPU_LOCK:
        return judge_sample(extracted, spec, gpu=gpu)
