"""`ptxbench mcp`: the judge's tools over the Model Context Protocol, for agents PTXBench does not drive.

An external agent (a coding assistant that speaks MCP) connects over stdio, or over streamable
HTTP or SSE on 127.0.0.1 only, and gets the same tools as `ptxbench run --agent`
(models/agent_tools.py) plus two to read the work: `list_tasks` and `describe_task` (the task's
prompt at the server's context level: train sizes and the headline size, never the held-out
ones). Every judge call names its task.

What is recorded: a session is a run of the agent (its model row named by `--agent-name`, else by
the client's own name, kind `agent`); the first judge call for a task opens an episode of that
run, each call is a step, and `submit` ends the episode with its kernel as a sample judged in
full. An episode still open when the session ends is closed without a kernel (`no_candidate`,
saying so). The held-out results stay in the store: the answer to `submit` is the sample's id and
its train-size verdict.

Limits per session: `rate` judge calls a minute (a call over it is refused at once with the wait,
never queued) and `gpu_budget_s` of GPU time for `check` and `time` together (past it they answer
`skipped: …`). The SDK (`mcp`) is imported only when the server is built, so the rest of
PTXBench works without it.
"""

# No `from __future__ import annotations`: the SDK reads the tools' signatures, whose annotations
# name `Context` from inside build_server, so they must be evaluated where they are written.
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.db.judgement import add_judgement, evaluation_records
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
    start_episode,
    update_episode,
)
from ptxbench.db.writes import add_evaluation, add_sample, create_run, finish_run, get_or_create_model
from ptxbench.models.agent_tools import GpuAccess, JudgeTools, ToolOutcome, recorded_arguments
from ptxbench.models.judging import JudgeFailed, candidate_of, judge_sample
from ptxbench.services.catalogue import CONTEXT_LEVELS, tasks_for
from ptxbench.services.errors import UsageError

AGENT = "ptxbench mcp"
EVALUATION_SOURCE = "ptxbench mcp"
HOST = "127.0.0.1"  # the HTTP transports listen on this machine only
TRANSPORTS = ("stdio", "streamable-http", "sse")
SERVER_NAME = "ptxbench"


@dataclass(frozen=True)
class McpSettings:
    db_path: Path | None = None
    create: bool = False  # make a new store at db_path when there is none
    agent_name: str | None = None  # the model row's name; None: the client's own name
    context: str = "none"
    tasks: tuple[str, ...] = ()
    gpu: bool = False
    gpu_archs: tuple[str, ...] = ()
    rate_per_minute: int = 30
    gpu_budget_s: float = 600.0

    def __post_init__(self) -> None:
        if self.context not in CONTEXT_LEVELS:
            raise UsageError(f"--context: use {', '.join(CONTEXT_LEVELS)}")
        if self.rate_per_minute < 1:
            raise UsageError("--rate: at least one call a minute")
        if self.gpu_budget_s < 0:
            raise UsageError("--gpu-seconds: not negative")


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
) -> McpSettings:
    """Settings from the command line's words; UsageError for a bad one, NoStore (a StoreError) for a
    `db_path` that is not a store (unless `create`)."""
    from ptxbench.db.access import require_store
    from ptxbench.services.hardware import gpu_archs, gpu_wanted

    if db_path is not None and not create:
        require_store(db_path)

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
    )


class RateLimit:
    """A token bucket: `rate` calls a minute, as a burst of `rate` at most."""

    def __init__(self, rate_per_minute: int, clock: Any = time.monotonic) -> None:
        self.capacity = float(rate_per_minute)
        self.tokens = float(rate_per_minute)
        self.per_s = rate_per_minute / 60.0
        self.clock = clock
        self.last = clock()

    def take(self) -> float:
        """0 when the call may go ahead (and is counted), else the seconds until one may."""
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.per_s)
        self.last = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.per_s


@dataclass
class _Open:
    row: Episode
    tools: JudgeTools
    started: float = field(default_factory=time.perf_counter)


class Session:
    """One client's session: its run, its open episode per task, its limits."""

    def __init__(self, settings: McpSettings, db: Any, client_name: str | None) -> None:
        self.settings = settings
        self.db = db
        self.client_name = client_name or "mcp-client"
        self.run: Run | None = None
        self.open: dict[str, _Open] = {}
        self.rate = RateLimit(settings.rate_per_minute)
        self.gpu_spent_s = 0.0
        self.started = now_iso()

    @property
    def model_name(self) -> str:
        return self.settings.agent_name or self.client_name

    @property
    def source(self) -> str:
        return f"agent:{self.model_name} via {AGENT} (client {self.client_name})"

    def _run(self) -> Run:
        if self.run is None:
            model = get_or_create_model(self.db, self.model_name, kind="agent", source=self.source)
            assert model.id is not None
            self.run = create_run(
                self.db,
                Run(
                    model_id=model.id,
                    name=f"{self.model_name} · mcp · {self.settings.context} · {self.started}",
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
                    },
                ),
            )
        return self.run

    def episode(self, task_id: str) -> _Open:
        """The task's open episode, or a new one."""
        found = self.open.get(task_id)
        if found is not None:
            return found
        from ptxbench.tasks.spec import get_task

        run = self._run()
        index = self.db.execute(
            "SELECT COUNT(*) FROM agent_episodes WHERE run_id = ? AND task_id = ?", [run.id, task_id]
        ).fetchone()[0]
        budgets = {"rate_per_minute": self.settings.rate_per_minute, "gpu_s": self.settings.gpu_budget_s}
        row = start_episode(
            self.db,
            Episode(
                run_id=run.id,  # type: ignore[arg-type]
                task_id=task_id,
                sample_index=index,
                agent=AGENT,
                source=self.source,
                budgets=budgets,
            ),
        )
        tools = JudgeTools(get_task(task_id), GpuAccess(self.settings.gpu_archs, self.settings.gpu))
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

    def end(self, task_id: str, sample: Sample, status: str) -> Episode:
        ep = self.open.pop(task_id)
        ep.row.wall_s = round(time.perf_counter() - ep.started, 3)
        return finish_episode(self.db, ep.row, status, sample.id)

    def close(self) -> None:
        """The session is over: each open episode ends without a kernel, and the run is finished."""
        for task_id, ep in list(self.open.items()):
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
            row = self.end(task_id, sample, ENDED_PREFIX + "the session closed without a submit")
            _no_submit(self.db, ep.tools.spec, sample, row)
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


class Judge:
    """The server's state over every session: the store and the sessions by id (one on stdio)."""

    def __init__(self, settings: McpSettings) -> None:
        from ptxbench.db.seed import open_for_writing

        self.settings = settings
        self.db = open_for_writing(settings.db_path, create=settings.create)
        self.sessions: dict[str, Session] = {}

    def session(self, key: str, client_name: str | None) -> Session:
        found = self.sessions.get(key)
        if found is None:
            found = self.sessions[key] = Session(self.settings, self.db, client_name)
        return found

    def close(self) -> None:
        for session in self.sessions.values():
            session.close()
        self.sessions.clear()

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
        from ptxbench.models.agent import AgentBudget, agent_note
        from ptxbench.tasks.prompts import build_prompt
        from ptxbench.tasks.spec import get_task

        spec = get_task(self._allowed(task_id))
        prompt = build_prompt(spec, self.settings.context)
        note = agent_note(AgentBudget()).split("Budget:")[0].rstrip()
        return f"{prompt.system}\n\n{prompt.user}{note}\n\nEvery tool call names the task: task={spec.id!r}."

    def _allowed(self, task_id: str) -> str:
        if not isinstance(task_id, str) or task_id not in self.settings.tasks:
            shown = repr(task_id) if isinstance(task_id, str) and len(task_id) <= 80 else "of that name"
            raise UsageError(f"no task {shown} here; list_tasks names them")
        return task_id

    async def call(self, session: Session, name: str, task_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """One judge call: counted against the rate, recorded as a step, the episode ended by submit."""
        import anyio

        self._allowed(task_id)
        wait = session.rate.take()
        if wait > 0:
            raise UsageError(
                f"rate limit: at most {self.settings.rate_per_minute} judge calls a minute; try again in {wait:.1f} s"
            )
        ep = session.episode(task_id)
        left = self.settings.gpu_budget_s - session.gpu_spent_s
        ep.tools.gpu_budget_s = ep.tools.gpu_spent_s + max(0.0, left)
        out = await anyio.to_thread.run_sync(ep.tools.call, name, arguments)
        session.gpu_spent_s += out.gpu_s
        session.record(ep, name, arguments, out)
        if out.status.startswith("error: "):
            raise UsageError(out.result.get("error") or out.status)
        if out.submission is None:
            return out.result
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
            "note": "judged in full; the held-out sizes' results stay in the store",
        }


def _judge_locked(extracted: Any, spec: Any, gpu: bool) -> Any:
    from ptxbench.models.agent_tools import GPU_LOCK

    with GPU_LOCK:
        return judge_sample(extracted, spec, gpu=gpu)


def build_server(settings: McpSettings) -> Any:
    """The MCPServer with the tools bound to a Judge over the store. Raises ImportError without `mcp`."""
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    judge = Judge(settings)

    @asynccontextmanager
    async def lifespan(_server: Any) -> AsyncIterator[Judge]:
        try:
            yield judge
        finally:
            judge.close()

    server = MCPServer(
        SERVER_NAME,
        instructions=(
            "PTXBench judges GPU kernels written in architecture-specific PTX. list_tasks and describe_task "
            "say what to write; assemble, check and time judge a kernel as you work on it; submit hands in "
            "the final kernel for a task (judged in full; the episode ends)."
        ),
        lifespan=lifespan,
        log_level="WARNING",
    )

    def session_of(ctx: Context) -> Session:
        key, client = "stdio", None
        try:
            key = getattr(ctx.request_context, "session_id", None) or key
        except (AttributeError, LookupError, RuntimeError):  # no request context: one session then
            pass
        try:
            params = ctx.session.client_params
            info = params.client_info if params is not None else None
            client = f"{info.name}" if info is not None and info.name else None
        except (AttributeError, LookupError, RuntimeError):  # a client that sent nothing about itself
            client = None
        return judge.session(str(key), client)

    async def judged(ctx: Context, name: str, task: str, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            return await judge.call(session_of(ctx), name, task, arguments)
        except UsageError as exc:
            raise ToolError(str(exc)) from None

    def candidate(code: str, language: str, manifest: dict[str, Any] | None) -> dict[str, Any]:
        return {"code": code, "language": language, **({"manifest": manifest} if manifest is not None else {})}

    @server.tool(description="The tasks this server judges: id, title, arch, requested families, GPU here.")
    def list_tasks() -> list[dict[str, Any]]:
        return judge.list_tasks()

    @server.tool(description="A task's prompt: what to compute, the interface, train sizes, the candidate format.")
    def describe_task(task: str) -> str:
        try:
            return judge.describe_task(task)
        except UsageError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(description="Assemble a kernel for the task with ptxas and inspect it (runs nothing).")
    async def assemble(
        task: str, code: str, ctx: Context, language: str = "ptx", manifest: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return await judged(ctx, "assemble", task, candidate(code, language, manifest))

    @server.tool(description="Run and verify a kernel at the task's train sizes on the GPU (no timing).")
    async def check(
        task: str, code: str, ctx: Context, language: str = "ptx", manifest: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return await judged(ctx, "check", task, candidate(code, language, manifest))

    @server.tool(
        name="time", description="Time a kernel at the headline size against the library (speedup, speed of light)."
    )
    async def time_kernel(
        task: str, code: str, ctx: Context, language: str = "ptx", manifest: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return await judged(ctx, "time", task, candidate(code, language, manifest))

    @server.tool(description="Submit the final kernel for a task: judged in full; the task's episode ends.")
    async def submit(
        task: str, code: str, ctx: Context, language: str = "ptx", manifest: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return await judged(ctx, "submit", task, candidate(code, language, manifest))

    return server


def serve(settings: McpSettings, transport: str = "stdio", port: int = 8765) -> None:
    """Run the server until the client goes away (stdio) or the process is stopped."""
    if transport not in TRANSPORTS:
        raise UsageError(f"--transport: use {', '.join(TRANSPORTS)}")
    server = build_server(settings)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run(transport, host=HOST, port=port)
