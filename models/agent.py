"""Agent episodes: a model that calls the judge's tools through its endpoint's function calling.

For each task and each of `samples` slots, one **episode**: the task's prompt (at the run's
context level, its answer-format lines replaced by the tools' way of working: models/agent_context.py)
then replies and tool calls until the model calls `submit` or a budget runs out — replies (turns),
tool calls, tokens, wall time, and the GPU time the `check` and `time` tools may spend. Every reply
and every call with its arguments, result and time is a step in the store as it happens
(db/trajectories.py). The submitted kernel is a sample of the run, judged in full (held-out sizes
included) like any sample; an episode that never submits leaves a `no_candidate` sample that says why.

The kernel is a file in the episode's workspace (models/workspace.py): the model writes it once and
edits it; the judge's tools act on it. The tools (models/agent_tools.py) see only the train sizes.

Budgets hold inside a step, not only between requests: a reply's tokens are counted before its tool
calls run (a reply that passes the token budget runs none of them); the wall budget bounds the wait
for a reply and is each tool call's deadline; and every tool answer says what is left, with a
warning before the last call or reply.

The conversation stays inside the model's context: reasoning is never sent back, long arguments go
back as a note, and past `context_tokens` (or when the endpoint says the context is exceeded) it is
compacted to the prompt, the file and the last results. A context overflow is never taken for
missing function calling: only an endpoint that has not yet answered a request offering tools in
this run, refuses one, and answers the same prompt without tools is `ToolCallingUnsupported`.

A malformed call (arguments that are not JSON, too large or nested too deep, a tool that does not
exist) is answered with an error the model can act on; parallel calls in one reply are answered in
order. A call's arguments are stored once, in its step, and only within the caps. A reply without a
tool call gets one reminder; a second in a row ends the episode.

Resumable like a plain run: a slot whose episode left a sample is skipped (its sample judged if it
was not), an episode cut short by a stop (SIGINT, a cancelled run) or by its process's death is
`ended: interrupted`, and the slot starts again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import sqlite_utils

from ptxbench.db.judgement import add_judgement, evaluation_records
from ptxbench.db.queries import get_sample, latest_evaluation
from ptxbench.db.records import Run, Sample
from ptxbench.db.store import write_transaction
from ptxbench.db.trajectories import (
    ENDED_PREFIX, SUBMITTED, Episode, Step, abandon_running, add_step, finish_episode, finished_episode,
    next_step_number, start_episode, update_episode,
)
from ptxbench.db.writes import add_evaluation, add_sample, finish_run, get_or_create_model
from ptxbench.models import agent_tools
from ptxbench.models.agent_context import (
    OVERFLOW_STATUSES, TokenGauge, agent_system, agent_user, compacted, conversation_chars, echoed_arguments,
    is_overflow, summarise_result, tools_note, visible_text,
)
from ptxbench.models.agent_tools import GpuAccess, JudgeTools, ToolOutcome, tool_schemas
from ptxbench.models.client import ChatClient, ChatResult, EndpointError
from ptxbench.models.generate import RunConfig, open_or_resume
from ptxbench.models.judging import JudgeFailed, candidate_of, judge_sample
from ptxbench.tasks.prompts import PROMPT_VERSION, Prompt, build_prompt
from ptxbench.tasks.spec import TaskSpec, get_task

Progress = Callable[[dict[str, Any]], None]
AGENT = "ptxbench run --agent"
EVALUATION_SOURCE = "ptxbench run --agent"
AGENT_PROMPT_VERSION = "ptxbench-agent/2"
NO_REPLY = ENDED_PREFIX + "no reply from the endpoint"
INTERRUPTED = ENDED_PREFIX + "interrupted"
CONTEXT_OVERFLOW = ENDED_PREFIX + "context overflow"
PROBE_STATUSES = frozenset({400, 422})   # a request shape refused: perhaps the tools
MAX_COMPACTIONS = 3                      # per reply: a refusal that compaction does not cure is the endpoint's
COMPACT_TO = 0.6                         # after an overflow, the conversation is cut to this share of its size
LOW_SHARE = 0.1                          # a budget below this share of itself is warned about

NUDGE = ("Use the tools: write the kernel with `write_file`, judge it with `assemble`, `check` and `time`, and "
         "call `submit` to hand in the file as your final kernel. A kernel in a message is not judged.")


def agent_note(budget: AgentBudget) -> str:
    """What the user message adds in agent mode: the tools, the budgets, the way to finish."""
    tokens = f", {budget.tokens:,} tokens" if budget.tokens else ""
    return tools_note(budget_line=f"{budget.tool_calls} tool calls, {budget.turns} replies{tokens}, "
                                  f"{budget.wall_s:g} s, {budget.gpu_s:g} GPU seconds for check and time")


def agent_messages(prompt: Prompt, budget: AgentBudget) -> list[dict[str, Any]]:
    """An episode's opening: one system message and one user message that agree on how to answer."""
    return [{"role": "system", "content": agent_system(prompt)},
            {"role": "user", "content": agent_user(prompt) + agent_note(budget)}]


class ToolCallingUnsupported(EndpointError):
    """The endpoint answers plain requests but refuses the same request offering tools."""


@dataclass(frozen=True)
class AgentBudget:
    tool_calls: int = 24              # tool calls per episode
    turns: int = 8                    # model replies per episode
    tokens: int | None = None         # prompt + completion tokens per episode, as the endpoint reports them
    wall_s: float = 1800.0            # seconds per episode
    gpu_s: float = 600.0              # GPU seconds the check and time tools may spend per episode
    context_tokens: int | None = None  # the conversation is compacted before it would pass this

    def __post_init__(self) -> None:
        if self.tool_calls < 1 or self.turns < 1 or self.wall_s <= 0 or self.gpu_s < 0:
            raise ValueError("an episode needs at least one tool call, one reply and some wall time")
        if self.tokens is not None and self.tokens < 1:
            raise ValueError("a token budget must be at least 1")
        if self.context_tokens is not None and self.context_tokens < 256:
            raise ValueError("a context budget must be at least 256 tokens")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AgentConfig(RunConfig):
    """A run's settings (model, endpoint, tasks, level, samples, client options) and the episodes' budget.
    `turns` is not used: the budget's replies are the turns."""

    budget: AgentBudget = AgentBudget()
    gpu_archs: tuple[str, ...] = ()   # the archs of the GPUs present

    @property
    def model_name(self) -> str:
        """The store's name for the model working as an agent (kept apart from its plain runs)."""
        return f"{self.model} (agent)"

    @property
    def name(self) -> str:
        if self.run_name:
            return self.run_name
        temp = "default" if self.temperature is None else f"{self.temperature:g}"
        name = f"{self.model} · agent · {self.context} · {PROMPT_VERSION} · {AGENT_PROMPT_VERSION} · temperature {temp}"
        return name + (f" · max_tokens {self.max_tokens}" if self.max_tokens is not None else "")

    @property
    def source(self) -> str:
        return f"model:{self.model} via {self.base_url} (agent)"


@dataclass
class AgentReport:
    run_id: int
    run_name: str
    resumed: bool
    episodes: int = 0                 # episodes run now
    submitted: int = 0
    judged: int = 0
    already_done: int = 0
    requests: int = 0
    tool_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    categories: Counter = field(default_factory=Counter)
    endings: Counter = field(default_factory=Counter)
    finished: bool = False
    aborted: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["categories"], d["endings"] = dict(self.categories), dict(self.endings)
        return d


class _Episode:
    """One episode's state: the conversation, its store row, and what it ended with."""

    def __init__(self, row: Episode, tools: JudgeTools, messages: list[dict[str, Any]], wall_s: float) -> None:
        self.row = row
        self.tools = tools
        self.head = list(messages)        # the prompt: what a compacted conversation starts from
        self.messages = messages
        self.started = time.perf_counter()
        self.deadline = time.monotonic() + wall_s   # every wait and every tool call ends by then
        self.submission: agent_tools.Submission | None = None
        self.ended: str | None = None
        self.last_text = ""
        self.idle = 0
        self.results: list[str] = []     # each tool answer in a line, for a compacted conversation
        self.gauge = TokenGauge()
        self.compactions = 0

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def tokens_used(self) -> int:
        return (self.row.tokens_in or 0) + (self.row.tokens_out or 0)


class AgentRun:
    """One invocation of an agent run over the store `db` (its connection stays on the loop's thread)."""

    def __init__(self, db: sqlite_utils.Database, config: AgentConfig, *, progress: Progress | None = None,
                 client: ChatClient | None = None) -> None:
        self.db = db
        self.config = config
        self.progress = progress or (lambda event: None)
        self.client = client
        self.specs: dict[str, TaskSpec] = {t: get_task(t) for t in config.tasks}
        self.prompts: dict[str, Prompt] = {t: build_prompt(s, config.context) for t, s in self.specs.items()}
        self.schemas = tool_schemas()
        self._schema_chars = len(json.dumps(self.schemas))  # sent with every request: part of the context
        self.report: AgentReport | None = None
        self.run: Run | None = None
        self._probed: bool | None = None  # whether the endpoint was found to answer without tools
        self._tools_worked = False        # a request offering tools was answered in this run
        self._judge_slots = asyncio.Semaphore(1 if config.gpu else 2)

    # -- the run row -----------------------------------------------------------------------------

    def _params(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        cfg, prev = self.config, previous or {}
        return {
            "mode": "agent", "agent_prompt_version": AGENT_PROMPT_VERSION, "base_url": cfg.base_url,
            "temperature": cfg.temperature, "max_tokens": cfg.max_tokens,
            "samples": max(cfg.samples, prev.get("samples", 0)),
            "turns": cfg.budget.turns, "budgets": cfg.budget.as_dict(),
            "tasks": sorted(set(cfg.tasks) | set(prev.get("tasks", []))), "api_key_env": cfg.api_key_env,
            "concurrency": cfg.concurrency, "timeout_s": cfg.timeout_s, "retries": cfg.retries, "gpu": cfg.gpu,
            "prompt_digests": {**prev.get("prompt_digests", {}), **{t: p.digest for t, p in self.prompts.items()}},
        }

    def open_run(self) -> AgentReport:
        cfg = self.config
        model = get_or_create_model(self.db, cfg.model_name, kind="agent", source=cfg.source, endpoint=cfg.base_url)
        run, resumed = open_or_resume(self.db, model, cfg.name, cfg.source, cfg.context, self.prompts, self._params)
        self.run = run
        self.report = AgentReport(run_id=run.id, run_name=run.name, resumed=resumed)  # type: ignore[arg-type]
        return self.report

    # -- the whole run ---------------------------------------------------------------------------

    async def execute(self) -> AgentReport:
        report = self.report or self.open_run()
        own_client = self.client is None
        client = self.client or ChatClient(self.config.client_config())
        self.progress({"event": "start", "run_id": report.run_id, "run_name": report.run_name, "resumed": report.resumed,
                       "episodes": len(self.specs) * self.config.samples, "agent": True})
        slots = asyncio.Semaphore(max(1, self.config.concurrency))

        async def one(task_id: str, index: int) -> None:
            async with slots:
                await self._slot(client, task_id, index)

        jobs = [asyncio.create_task(one(t, i)) for t in self.config.tasks for i in range(self.config.samples)]
        try:
            results = await asyncio.gather(*jobs, return_exceptions=True)
        finally:
            for job in jobs:
                job.cancel()
            if own_client:
                await client.close()
        unsupported = next((r for r in results if isinstance(r, ToolCallingUnsupported)), None)
        if unsupported is not None:
            raise unsupported
        for result in results:
            if isinstance(result, EndpointError):
                report.aborted = str(result)
            elif isinstance(result, BaseException):
                raise result
        report.finished = not report.failures and report.aborted is None
        if report.finished:
            finish_run(self.db, report.run_id)
        self.progress({"event": "done", **report.to_dict()})
        return report

    async def _slot(self, client: ChatClient, task_id: str, index: int) -> None:
        assert self.run is not None and self.report is not None
        run_id = self.run.id
        assert run_id is not None
        done = finished_episode(self.db, run_id, task_id, index)
        if done is not None:
            self.report.already_done += 1
            sample = get_sample(self.db, done.sample_id)  # type: ignore[arg-type]
            if sample is not None and latest_evaluation(self.db, sample.id) is None:  # type: ignore[arg-type]
                await self._judge(task_id, index, sample, done)
            return
        abandon_running(self.db, run_id, task_id, index)
        await self._episode(client, task_id, index)

    # -- one episode -----------------------------------------------------------------------------

    async def _episode(self, client: ChatClient, task_id: str, index: int) -> None:
        assert self.run is not None and self.report is not None
        cfg, spec, budget = self.config, self.specs[task_id], self.config.budget
        row = start_episode(self.db, Episode(run_id=self.run.id, task_id=task_id, sample_index=index,  # type: ignore[arg-type]
                                             agent=AGENT, source=cfg.source, budgets=budget.as_dict()))
        tools = JudgeTools(spec, GpuAccess(cfg.gpu_archs, cfg.gpu), gpu_budget_s=budget.gpu_s)
        ep = _Episode(row, tools, agent_messages(self.prompts[task_id], budget), budget.wall_s)
        self.report.episodes += 1
        where = {"task": task_id, "index": index, "episode_id": row.id}
        try:
            while ep.ended is None:
                ep.ended = self._over_budget(ep)
                if ep.ended is not None:
                    self._note(ep, ep.ended, {"ended": ep.ended})
                    break
                result = await self._ask(client, ep)
                if result is None:
                    break
                await self._answer(ep, result, where)
                update_episode(self.db, self._totals(ep))
        except ToolCallingUnsupported as exc:
            finish_episode(self.db, self._totals(ep), ENDED_PREFIX + "the endpoint does not support tool calling", None)
            raise exc
        except EndpointError as exc:
            finish_episode(self.db, self._totals(ep), ENDED_PREFIX + f"the endpoint refused: {exc}"[:300], None)
            raise
        except (asyncio.CancelledError, KeyboardInterrupt):  # a stop: no sample, and a resume runs the slot again
            try:
                finish_episode(self.db, self._totals(ep), INTERRUPTED, None)
            except Exception:  # the store itself failed: a resume marks the episode interrupted
                pass
            raise
        except Exception as exc:  # a fault of the run itself: the episode is closed, never left `running`
            try:
                finish_episode(self.db, self._totals(ep),
                               ENDED_PREFIX + f"the run failed: {type(exc).__name__}: {exc}"[:300], None)
            except Exception:  # the store itself failed: a resume marks the episode interrupted
                pass
            raise
        status = SUBMITTED if ep.submission is not None else ep.ended or ENDED_PREFIX + "unknown"
        overflow = status.startswith(CONTEXT_OVERFLOW)
        if ep.submission is None and not overflow and (ep.row.turns == 0 or status == NO_REPLY):
            # The endpoint failed for good, not the model: no sample, and a rerun tries the slot again.
            finish_episode(self.db, self._totals(ep), status, None)
            self.report.endings[status] += 1
            return
        sample = self._store_sample(spec, index, ep)
        row = finish_episode(self.db, self._totals(ep), status, sample.id)
        self.report.endings[status] += 1
        if ep.submission is not None:
            self.report.submitted += 1
            await self._judge(task_id, index, sample, row)
        else:
            self._store_no_submit(spec, sample, row)
        self.progress({"event": "episode", **where, "status": status, "sample_id": sample.id,
                       "turns": row.turns, "tool_calls": row.tool_calls})

    def _over_budget(self, ep: _Episode) -> str | None:
        b, row = self.config.budget, ep.row
        if row.turns >= b.turns:
            return f"{ENDED_PREFIX}reply budget used up ({b.turns} replies) without a submit"
        if row.tool_calls >= b.tool_calls:
            return f"{ENDED_PREFIX}tool-call budget used up ({b.tool_calls} calls) without a submit"
        if b.tokens is not None and ep.tokens_used() >= b.tokens:
            return f"{ENDED_PREFIX}token budget used up ({b.tokens:,} tokens) without a submit"
        if ep.seconds_left() <= 0:
            return f"{ENDED_PREFIX}wall-time budget used up ({b.wall_s:g} s) without a submit"
        return None

    async def _ask(self, client: ChatClient, ep: _Episode) -> ChatResult | None:
        """One reply, or None when none came (the episode then ends, and says why). The wait is bounded
        by the episode's wall time; a conversation past the context budget, or refused as too long, is
        compacted and sent again."""
        assert self.report is not None
        budget = self.config.budget
        cures = 0
        while True:
            room = budget.context_tokens and budget.context_tokens - self._schema_tokens(ep)
            if room and ep.gauge.tokens(ep.messages) >= room:
                if not self._compact(ep, room, "the conversation reached the context budget"):
                    return None
            left = ep.seconds_left()
            if left <= 0:
                self._end(ep, f"{ENDED_PREFIX}wall-time budget used up ({budget.wall_s:g} s) without a submit")
                return None
            sent = conversation_chars(ep.messages) + self._schema_chars
            try:
                result = await asyncio.wait_for(client.complete(ep.messages, tools=self.schemas), timeout=left)
            except asyncio.TimeoutError:
                self._end(ep, f"{ENDED_PREFIX}wall-time budget used up ({budget.wall_s:g} s) waiting for a reply, "
                              "without a submit")
                return None
            except RecursionError:  # a reply body nested too deep for the JSON parser: the model's, said back to it
                return ChatResult(content="", malformed="the reply's JSON nests too deep to read", attempts=1)
            except EndpointError as exc:
                overflow = is_overflow(exc.status, str(exc))
                if (not overflow and exc.status in PROBE_STATUSES and not self._tools_worked
                        and await self._answers_without_tools(client, ep.messages)):
                    raise ToolCallingUnsupported(
                        f"{self.config.base_url} answers chat requests but refused one offering tools ({exc}); it does "
                        "not support function calling as configured (vLLM needs --enable-auto-tool-choice and a "
                        "--tool-call-parser). Run with --agent-fallback turns for the plain multi-turn mode instead.",
                        exc.status) from None
                # Tools have worked here, so a refused shape is the conversation's length even when unsaid.
                if not (overflow or (exc.status in OVERFLOW_STATUSES and self._tools_worked)) or cures >= MAX_COMPACTIONS:
                    if overflow:
                        self._end(ep, f"{CONTEXT_OVERFLOW}: the endpoint still refused after {cures} "
                                      f"compaction(s): {exc}"[:400])
                        return None
                    raise
                cures += 1
                target = int(ep.gauge.tokens(ep.messages) * COMPACT_TO)
                if room:
                    target = min(target, room)
                if not self._compact(ep, target, f"the endpoint refused the conversation as too long: {exc}"[:300]):
                    return None
                continue
            break
        if not result.answered:
            ep.ended = NO_REPLY
            self._note(ep, ep.ended, {"error": result.error})
            self.report.failures.append({"task": ep.row.task_id, "index": ep.row.sample_index, "kind": "request",
                                         "message": result.error or "no reply"})
            self.progress({"event": "failure", "task": ep.row.task_id, "index": ep.row.sample_index, "kind": "request",
                           "message": result.error or "no reply"})
            return None
        if result.ok:
            self._tools_worked = True
            ep.gauge.learn(sent, result.tokens_in)
        return result

    def _schema_tokens(self, ep: _Episode) -> int:
        return int(self._schema_chars / ep.gauge.chars_per_token) + 1

    def _end(self, ep: _Episode, why: str) -> None:
        ep.ended = why
        self._note(ep, why, {"ended": why})

    def _compact(self, ep: _Episode, target: int, why: str) -> bool:
        """The conversation cut to fit `target` tokens (a note step says so); False, and the episode ended,
        when even the prompt does not fit."""
        ws = ep.tools.workspace
        left = self._budget_left(ep)
        progress = (f"You have made {ep.row.turns} replies and {ep.row.tool_calls} tool calls; left: "
                    + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in left.items()) + ".")
        before = ep.gauge.tokens(ep.messages)
        messages = compacted(ep.head, file_code=ws.code, file_language=ws.language, manifest=ws.manifest,
                             results=ep.results, progress=progress, budget_tokens=target, gauge=ep.gauge)
        if messages is None:
            self._end(ep, f"{CONTEXT_OVERFLOW}: the task's prompt alone is about {ep.gauge.tokens(ep.head):,} "
                          f"tokens, over the {target:,} the conversation must fit")
            return False
        ep.messages = messages
        ep.compactions += 1
        self._note(ep, "ok", {"compacted": {"why": why, "tokens_before": before,
                                            "tokens_after": ep.gauge.tokens(messages), "budget_tokens": target}})
        self.progress({"event": "compacted", "task": ep.row.task_id, "index": ep.row.sample_index, "why": why})
        return True

    async def _answers_without_tools(self, client: ChatClient, messages: list[dict[str, Any]]) -> bool:
        if self._probed is None:
            try:
                probe = await client.complete(messages[:2])
                self._probed = probe.ok
            except EndpointError:
                self._probed = False
        return self._probed

    def _budget_left(self, ep: _Episode) -> dict[str, Any]:
        b, row = self.config.budget, ep.row
        left: dict[str, Any] = {"tool_calls": max(0, b.tool_calls - row.tool_calls),
                                "replies": max(0, b.turns - row.turns)}
        if b.tokens is not None:
            left["tokens"] = max(0, b.tokens - ep.tokens_used())
        left["seconds"] = round(max(0.0, ep.seconds_left()), 1)
        assert ep.tools.budget is not None
        left["gpu_seconds"] = round(ep.tools.budget.left(), 1)
        return left

    def _warnings(self, ep: _Episode, left: dict[str, Any]) -> str | None:
        b, said = self.config.budget, []
        if ep.submission is not None:
            return None
        if left["tool_calls"] == 0:
            said.append("no tool calls are left: the episode ends without a kernel")
        elif left["tool_calls"] == 1:
            said.append("one tool call is left: make it `submit`")
        if left["replies"] == 0:
            said.append("this was your last reply: unless it submitted, the episode ends without a kernel")
        elif left["replies"] == 1:
            said.append("your next reply is your last: call `submit` in it")
        if b.tokens is not None and left["tokens"] < LOW_SHARE * b.tokens:
            said.append(f"only {left['tokens']:,} tokens are left")
        if left["seconds"] < LOW_SHARE * b.wall_s:
            said.append(f"only {left['seconds']:g} s are left")
        return "; ".join(said) or None

    async def _answer(self, ep: _Episode, result: ChatResult, where: dict[str, Any]) -> None:
        """Record the reply, answer its tool calls in order, and extend the conversation."""
        assert self.report is not None
        row, budget = ep.row, self.config.budget
        row.turns += 1
        self.report.requests += 1
        if result.tokens_in is not None or result.tokens_out is not None:
            row.tokens_in = (row.tokens_in or 0) + (result.tokens_in or 0)
            row.tokens_out = (row.tokens_out or 0) + (result.tokens_out or 0)
            self.report.tokens_in += result.tokens_in or 0
            self.report.tokens_out += result.tokens_out or 0
        if result.cost is not None:
            row.cost = (row.cost or 0.0) + result.cost
            self.report.cost = (self.report.cost or 0.0) + result.cost
        calls = _read_calls(result.tool_calls)
        status = "error: the reply is not a chat completion" if result.malformed else "ok"
        # The call's arguments are kept once, in its tool step; the reply's step names the calls.
        named = [{"id": c["id"], "name": c["name"]} for c in calls]
        self._step(ep, Step(episode_id=row.id, step=0, kind="model", turn=row.turns, status=status,  # type: ignore[arg-type]
                            result={"content": result.content or "", "tool_calls": named,
                                    "finish_reason": result.finish_reason, **({"malformed": result.malformed}
                                                                               if result.malformed else {})},
                            seconds=result.latency_s, tokens_in=result.tokens_in, tokens_out=result.tokens_out))
        if result.malformed:
            ep.messages.append({"role": "user", "content": "Your last reply did not arrive intact. " + NUDGE})
            return
        # A reply past the token budget runs none of its calls: the budget is checked before any tool.
        over_tokens = budget.tokens is not None and ep.tokens_used() > budget.tokens
        assistant: dict[str, Any] = {"role": "assistant", "content": visible_text(result.content)}
        if calls:
            assistant["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["name"], "arguments": echoed_arguments(c["kept"])}} for c in calls]
        ep.messages.append(assistant)
        if not calls:
            ep.last_text = result.content or ""
            ep.idle += 1
            if ep.idle >= 2:
                self._end(ep, f"{ENDED_PREFIX}the model stopped calling tools without a submit")
            else:
                ep.messages.append({"role": "user", "content": NUDGE})
                self._note(ep, "ok", {"message": NUDGE})
            return
        ep.idle = 0
        for call in calls:
            if ep.submission is not None:
                out = ToolOutcome(call["name"], "skipped: after submit", {"error": "not run: the episode ended with submit"})
            elif over_tokens:
                out = ToolOutcome(call["name"], "skipped: token budget used up", {
                    "error": f"not run: this reply took the episode to {ep.tokens_used():,} tokens, over its budget "
                             f"of {budget.tokens:,}"})
            elif row.tool_calls >= budget.tool_calls or ep.seconds_left() <= 0:
                out = ToolOutcome(call["name"], "skipped: budget used up",
                                  {"error": "not run: the episode's budget is used up"})
            else:
                row.tool_calls += 1
                self.report.tool_calls += 1
                out = await asyncio.to_thread(ep.tools.call, call["raw_name"], call["arguments"], deadline=ep.deadline)
                row.gpu_s += out.gpu_s
                if out.submission is not None:
                    ep.submission = out.submission
            left = self._budget_left(ep)
            out.result["budget_left"] = left
            warning = self._warnings(ep, left)
            if warning:
                out.result["warning"] = warning
            self._step(ep, Step(episode_id=row.id, step=0, kind="tool", turn=row.turns, tool=call["name"],  # type: ignore[arg-type]
                                call_id=call["id"], arguments=call["kept"], result=out.result, status=out.status,
                                seconds=round(out.seconds, 4), gpu_s=round(out.gpu_s, 4) if out.gpu_s else None))
            ep.messages.append({"role": "tool", "tool_call_id": call["id"], "content": out.text()})
            ep.results.append(summarise_result(row.turns, call["name"], out.status, out.result))
            self.progress({"event": "step", **where, "turn": row.turns, "tool": call["name"], "status": out.status,
                           "category": out.result.get("category")})
        if ep.submission is not None:
            ep.ended = SUBMITTED
        elif over_tokens:
            self._end(ep, f"{ENDED_PREFIX}token budget used up ({budget.tokens:,} tokens) without a submit")

    def _step(self, ep: _Episode, step: Step) -> None:
        add_step(self.db, replace(step, step=next_step_number(self.db, ep.row.id)))  # type: ignore[arg-type]

    def _note(self, ep: _Episode, status: str, result: dict[str, Any]) -> None:
        self._step(ep, Step(episode_id=ep.row.id, step=0, kind="note", turn=ep.row.turns or None,  # type: ignore[arg-type]
                            status="ok" if status.startswith(ENDED_PREFIX) else status, result=result))

    def _totals(self, ep: _Episode) -> Episode:
        ep.row.wall_s = round(ep.elapsed(), 3)
        ep.row.gpu_s = round(ep.row.gpu_s, 3)
        return ep.row

    # -- the episode's sample ------------------------------------------------------------------

    def _store_sample(self, spec: TaskSpec, index: int, ep: _Episode) -> Sample:
        assert self.run is not None
        row, sub = ep.row, ep.submission
        common = dict(task_id=spec.id, source=self.config.source, run_id=self.run.id, sample_index=index,
                      turn=max(row.turns, 1), tokens_in=row.tokens_in, tokens_out=row.tokens_out,
                      latency_s=round(ep.elapsed(), 3))
        if sub is not None:
            return add_sample(self.db, Sample(language=sub.language, code=sub.code, manifest=sub.manifest,
                                              response=sub.stored_response(), **common))  # type: ignore[arg-type]
        return add_sample(self.db, Sample(language="none", code="", response=ep.last_text, **common))  # type: ignore[arg-type]

    def _store_no_submit(self, spec: TaskSpec, sample: Sample, row: Episode) -> None:
        """The verdict of an episode that never submitted: no candidate, and why."""
        from ptxbench.engine.static import StaticVerdict

        assert self.report is not None
        reason = f"the agent never called submit ({row.status.removeprefix(ENDED_PREFIX)})"
        verdict = StaticVerdict(category="no_candidate", stage="extract", arch=spec.arch, task_id=spec.id,
                                require=list(spec.families), evidence=reason, extract_evidence={"reason": reason})
        with write_transaction(self.db):
            judged = evaluation_records(verdict, sample.id, EVALUATION_SOURCE, {"agent": _agent_evidence(row)})  # type: ignore[arg-type]
            add_evaluation(self.db, judged.evaluation, judged.measurements)
        self.report.judged += 1
        self.report.categories["no_candidate"] += 1

    async def _judge(self, task_id: str, index: int, sample: Sample, row: Episode) -> None:
        assert self.report is not None
        spec = self.specs[task_id]
        extracted = await asyncio.to_thread(candidate_of, sample)   # off the event loop: it may extract a reply
        try:
            async with self._judge_slots:
                result = await asyncio.to_thread(_judge_locked, extracted, spec, self.config.gpu)
        except JudgeFailed as exc:
            failure = {"task": task_id, "index": index, "kind": "judge", "message": str(exc)}
            self.report.failures.append(failure)
            self.progress({"event": "failure", **failure})
            return
        evaluation = add_judgement(self.db, result, sample.id, EVALUATION_SOURCE, {"agent": _agent_evidence(row)})  # type: ignore[arg-type]
        self.report.judged += 1
        self.report.categories[evaluation.category] += 1
        self.progress({"event": "judged", "task": task_id, "index": index, "sample_id": sample.id,
                       "category": evaluation.category, "status": evaluation.status})


def _read_calls(raw: Any) -> list[dict[str, Any]]:
    """A reply's tool calls as the episode uses them: a short text id and name, the arguments as sent
    (the tools check them), and `kept`, what is recorded and echoed back to the endpoint: the text as
    sent within the caps, else a short note (models/agent_tools.py `recorded_arguments`)."""
    calls = []
    for i, call in enumerate(raw if isinstance(raw, list) else []):
        call = call if isinstance(call, dict) else {}
        call_id = call.get("id")
        call_id = call_id[:128] if isinstance(call_id, str) and call_id else f"call_{i}"
        arguments = call.get("arguments")
        calls.append({"id": call_id, "name": agent_tools.tool_name(call.get("name")), "raw_name": call.get("name"),
                      "arguments": arguments, "kept": agent_tools.recorded_arguments(arguments)})
    return calls


def _judge_locked(extracted: Any, spec: TaskSpec, gpu: bool) -> Any:
    with agent_tools.GPU_LOCK:
        return judge_sample(extracted, spec, gpu=gpu)


def _agent_evidence(row: Episode) -> dict[str, Any]:
    return {"episode_id": row.id, "status": row.status, "turns": row.turns, "tool_calls": row.tool_calls,
            "gpu_s": row.gpu_s}


def run_agent(db: sqlite_utils.Database, config: AgentConfig, *, progress: Progress | None = None,
              client: ChatClient | None = None) -> AgentReport:
    """Run (or resume) an agent run to completion; the store keeps every step as it goes."""
    async def main() -> AgentReport:
        runner = AgentRun(db, config, progress=progress, client=client)
        runner.open_run()
        return await runner.execute()

    return asyncio.run(main())
