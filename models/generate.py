"""A model run: prompts out, responses in, every turn stored and judged.

For each task and each of `samples` trajectories, up to `turns` turns:
ask the model (models/client.py), store the raw response at once as a sample
(language `none`), extract the candidate and fill it in, judge it (a thread, so
the event loop keeps the other requests moving), store the evaluation, and, if
the verdict leaves something to fix, build the next user message from it
(models/refine.py). Turn t+1 is a sample whose parent is turn t.

Judging is on this process's own worker unless a `TurnJudge` is handed in (the service layer
makes one for `--gpus` and `--cluster`: services/turn_judging.py). Either way the rows are
written here, on the loop's thread, and a trajectory waits for its turn's row before it asks
again: the turns of one trajectory stay in order, different trajectories are judged at once.

Resumable: a run is found again by its model and name (the name defaults to
model · context · prompt version · temperature · max tokens), and every
(task, sample_index, turn) slot already stored is reused: a stored, judged
turn is skipped; a stored turn without a verdict is judged from its stored
response; only missing turns go to the endpoint. Conversations are rebuilt
from the store, so a resumed trajectory sends what the first attempt would
have sent. A request that fails for good ends its trajectory and leaves the
run unfinished; everything stored so far stays.

A stop (`stop.requested`: SIGINT/SIGTERM in the CLI) sends no more requests (those in flight are
dropped: nothing of them is stored) and begins no more judgements (a stored turn waiting for one
is left unjudged); the judgements already running end and write their rows. Resuming does the rest.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypeVar

import sqlite_utils

from ptxbench.db.generation import find_run, update_run_params
from ptxbench.db.headline import stored_turns
from ptxbench.db.judgement import add_judgement, evaluation_records
from ptxbench.db.queries import find_sample, latest_evaluation, measurements_for
from ptxbench.db.records import Evaluation, Model, Run, Sample
from ptxbench.db.store import write_transaction
from ptxbench.db.writes import CONTEXT_LEVELS, add_evaluation, add_sample, create_run, finish_run, get_or_create_model
from ptxbench.engine.extract import ExtractResult
from ptxbench.models.client import ChatClient, ChatResult, ClientConfig, EndpointError
from ptxbench.models.judging import JudgeFailed, JudgeWithdrawn, candidate_of, fill_candidate, judge_sample
from ptxbench.models.refine import assistant_text, conversation, feedback_message, is_final
from ptxbench.tasks.prompts import PROMPT_VERSION, Prompt, build_prompt
from ptxbench.tasks.spec import TaskSpec, get_task

Progress = Callable[[dict[str, Any]], None]
# A turn judged elsewhere (a pool of GPU workers, a cluster): the judgement and the evidence to store beside it
# (which worker made it); raises JudgeFailed when the tool failed, so the turn stays unjudged for a resume.
TurnJudge = Callable[[ExtractResult, TaskSpec, Sample], Awaitable[tuple[Any, dict[str, Any]]]]
EVALUATION_SOURCE = "ptxbench run"
STOP_POLL_S = 0.2
T = TypeVar("T")


class RunStop(Protocol):
    """What a run asks while it goes (services/batch.SignalStop, StopFlag): `requested` stops it; `abandoned`, a
    second stop, is for a judge elsewhere, to stop waiting for its running jobs (services/turn_judging.py)."""

    @property
    def requested(self) -> bool: ...

    @property
    def abandoned(self) -> bool: ...


class RunMismatch(ValueError):
    """The run found for resuming was made with different prompts: resuming would mix them."""


@dataclass(frozen=True)
class RunConfig:
    model: str
    base_url: str
    tasks: tuple[str, ...]
    context: str = "none"
    samples: int = 1
    turns: int = 1
    temperature: float | None = None
    max_tokens: int | None = None
    concurrency: int = 4
    timeout_s: float = 600.0
    retries: int = 6
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    api_key_env: str | None = None   # the variable's name is stored, never its value
    run_name: str | None = None
    gpu: bool = False
    judge_workers: int = 0           # 0: one with a GPU (one worker process), else two

    def __post_init__(self) -> None:
        if self.context not in CONTEXT_LEVELS:
            raise ValueError(f"context must be one of {', '.join(CONTEXT_LEVELS)}, got {self.context!r}")
        if self.samples < 1 or self.turns < 1:
            raise ValueError("samples and turns must be at least 1")
        if not self.tasks:
            raise ValueError("no tasks to run")

    @property
    def name(self) -> str:
        if self.run_name:
            return self.run_name
        temp = "default" if self.temperature is None else f"{self.temperature:g}"
        name = f"{self.model} · {self.context} · {PROMPT_VERSION} · temperature {temp}"
        return name + (f" · max_tokens {self.max_tokens}" if self.max_tokens is not None else "")

    @property
    def source(self) -> str:
        return f"model:{self.model} via {self.base_url}"

    def client_config(self) -> ClientConfig:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return ClientConfig(base_url=self.base_url, model=self.model, api_key=key, temperature=self.temperature,
                            max_tokens=self.max_tokens, timeout_s=self.timeout_s, retries=self.retries,
                            backoff_s=self.backoff_s, backoff_max_s=self.backoff_max_s,
                            concurrency=self.concurrency)


@dataclass
class RunReport:
    run_id: int
    run_name: str
    resumed: bool
    requests: int = 0                # replies received from the endpoint
    stored: int = 0                  # new samples
    judged: int = 0                  # new evaluations
    already_done: int = 0            # judged turns found in the store
    failures: list[dict[str, Any]] = field(default_factory=list)
    categories: Counter = field(default_factory=Counter)
    tokens_in: int = 0
    tokens_out: int = 0
    finished: bool = False
    aborted: str | None = None       # the endpoint refused the run
    stopped: bool = False            # a stop cut trajectories short (SIGINT/SIGTERM)
    dropped: int = 0                 # requests in flight at the stop: nothing stored, asked again on resume
    unjudged: int = 0                # stored turns the stop left without a verdict: judged on resume

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["categories"] = dict(self.categories)
        return d


@dataclass
class _Turn:
    sample: Sample
    evaluation: Evaluation | None
    malformed: bool = False
    meta: dict[str, Any] | None = None   # how the reply came (attempts, finish reason), when it came this time


class ModelRun:
    """One invocation of a run over the store `db` (its connection stays on the loop's thread)."""

    def __init__(self, db: sqlite_utils.Database, config: RunConfig, *, progress: Progress | None = None,
                 client: ChatClient | None = None, judge: TurnJudge | None = None,
                 stop: RunStop | None = None) -> None:
        self.db = db
        self.config = config
        self.progress = progress or (lambda event: None)
        self.client = client
        self.judge_elsewhere = judge
        self.stop = stop
        self._stopped = asyncio.Event()
        self._judged_at_stop = 0
        self.specs: dict[str, TaskSpec] = {t: get_task(t) for t in config.tasks}
        self.prompts: dict[str, Prompt] = {t: build_prompt(s, config.context) for t, s in self.specs.items()}
        workers = config.judge_workers or (1 if config.gpu else 2)
        self._judge_slots = asyncio.Semaphore(workers)
        self.report: RunReport | None = None
        self.run: Run | None = None

    # -- the run row -----------------------------------------------------------------

    def _params(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        cfg = self.config
        digests = {t: p.digest for t, p in self.prompts.items()}
        tasks = sorted(set(cfg.tasks) | set((previous or {}).get("tasks", [])))
        return {
            "base_url": cfg.base_url,
            "temperature": cfg.temperature,
            "max_tokens": cfg.max_tokens,
            "samples": max(cfg.samples, (previous or {}).get("samples", 0)),
            "turns": cfg.turns,  # a resumed run has the same budget (open_or_resume refuses another)
            "tasks": tasks,
            "api_key_env": cfg.api_key_env,
            "concurrency": cfg.concurrency,
            "timeout_s": cfg.timeout_s,
            "retries": cfg.retries,
            "gpu": cfg.gpu,
            "prompt_digests": {**(previous or {}).get("prompt_digests", {}), **digests},
        }

    def open_run(self) -> RunReport:
        cfg = self.config
        model = get_or_create_model(self.db, cfg.model, kind="model", source=cfg.source, endpoint=cfg.base_url)
        run, resumed = open_or_resume(self.db, model, cfg.name, cfg.source, cfg.context, self.prompts, self._params)
        self.run = run
        self.report = RunReport(run_id=run.id, run_name=run.name, resumed=resumed)  # type: ignore[arg-type]
        return self.report

    # -- the whole run -------------------------------------------------------------------

    async def execute(self) -> RunReport:
        report = self.report or self.open_run()
        own_client = self.client is None
        client = self.client or ChatClient(self.config.client_config())
        self.progress({"event": "start", "run_id": report.run_id, "run_name": report.run_name,
                       "resumed": report.resumed, "trajectories": len(self.specs) * self.config.samples})
        watcher = asyncio.create_task(self._watch_stop()) if self.stop is not None else None
        jobs = [asyncio.create_task(self._trajectory(client, task_id, index))
                for task_id in self.config.tasks for index in range(self.config.samples)]
        try:
            results = await asyncio.gather(*jobs, return_exceptions=True)
        finally:
            for job in [*jobs, *([watcher] if watcher else [])]:
                job.cancel()
            if own_client:
                await client.close()
        for result in results:
            if isinstance(result, EndpointError):
                report.aborted = str(result)
            elif isinstance(result, BaseException):
                raise result
        if report.stopped:
            self.progress({"event": "log", "level": "info", "message":
                           f"stopped: {report.judged - self._judged_at_stop} judgement(s) running at the stop wrote "
                           f"their rows; {report.unjudged} stored turn(s) left unjudged and {report.dropped} "
                           "request(s) dropped, for a resume (run the same command again)"})
        report.finished = not report.failures and report.aborted is None and not report.stopped
        if report.finished:
            finish_run(self.db, report.run_id)
        self.progress({"event": "done", **report.to_dict()})
        return report

    async def _trajectory(self, client: ChatClient, task_id: str, index: int) -> None:
        assert self.report is not None and self.run is not None
        spec, prompt = self.specs[task_id], self.prompts[task_id]
        history: list[tuple[str, str]] = []
        parent: int | None = None
        for turn in range(1, self.config.turns + 1):
            where = {"task": task_id, "index": index, "turn": turn}
            sample = find_sample(self.db, run_id=self.run.id, task_id=task_id, sample_index=index,  # type: ignore[arg-type]
                                 turn=turn)
            if sample is None:
                if self._stopped.is_set():
                    self.report.stopped = True
                    return
                asked, result = await self._unless_stopped(client.complete(conversation(prompt.messages(), history)))
                if not asked:
                    self.report.stopped = True
                    self.report.dropped += 1
                    return
                assert result is not None
                if not result.answered:
                    self._fail(where, "request", result.error or "no reply")
                    return
                step = self._store_reply(spec, index, turn, parent, result)
            else:
                evaluation = latest_evaluation(self.db, sample.id)  # type: ignore[arg-type]
                step = _Turn(sample, evaluation, malformed=_was_malformed(evaluation))
                if evaluation is not None:
                    self.report.already_done += 1
            if step.evaluation is None:
                try:
                    if self._stopped.is_set():
                        raise JudgeWithdrawn("a stop came before its judgement began")
                    step.evaluation = await self._judge(spec, step.sample, step.meta)
                except JudgeWithdrawn:
                    self.report.stopped = True
                    self.report.unjudged += 1
                    return
                except JudgeFailed as exc:
                    self._fail(where, "judge", str(exc))
                    return
            evaluation = step.evaluation
            self.report.categories[evaluation.category] += 1
            self.progress({"event": "turn", **where, "sample_id": step.sample.id, "category": evaluation.category,
                           "status": evaluation.status})
            if is_final(evaluation):
                return
            measurements = measurements_for(self.db, evaluation.id)  # type: ignore[arg-type]
            history.append((assistant_text(step.sample.response, step.malformed),
                            feedback_message(spec, evaluation, measurements, step.sample)))
            parent = step.sample.id

    def _store_reply(self, spec: TaskSpec, index: int, turn: int, parent: int | None, result: ChatResult) -> _Turn:
        """The raw reply goes into the store first, as it came."""
        assert self.report is not None and self.run is not None
        sample = Sample(task_id=spec.id, language="none", source=self.config.source, code="",
                        response=result.content or "", run_id=self.run.id, sample_index=index, turn=turn,
                        parent_id=parent, tokens_in=result.tokens_in, tokens_out=result.tokens_out,
                        latency_s=result.latency_s)
        self.report.requests += 1
        self.report.tokens_in += result.tokens_in or 0
        self.report.tokens_out += result.tokens_out or 0
        evaluation = None
        if result.malformed is not None:
            # Nothing to extract from a broken reply: its verdict is fixed, stored with it in one transaction.
            with write_transaction(self.db):
                sample = add_sample(self.db, sample)
                judged = evaluation_records(_static_no_candidate(spec, result.malformed), sample.id,  # type: ignore[arg-type]
                                            EVALUATION_SOURCE, {"response": result.meta()})
                evaluation = add_evaluation(self.db, judged.evaluation, judged.measurements)
            self.report.judged += 1
        else:
            sample = add_sample(self.db, sample)
        self.report.stored += 1
        return _Turn(sample, evaluation, malformed=result.malformed is not None, meta=result.meta())

    async def _judge(self, spec: TaskSpec, sample: Sample, meta: dict[str, Any] | None) -> Evaluation:
        assert self.report is not None
        # Extracting reads the whole reply: in a thread, so that no reply holds up the event loop.
        extracted = fill_candidate(self.db, sample, await asyncio.to_thread(candidate_of, sample))
        extra: dict[str, Any] = {}
        if self.judge_elsewhere is not None:
            result, extra = await self.judge_elsewhere(extracted, spec, sample)
        else:
            began, _ = await self._unless_stopped(self._judge_slots.acquire())
            if not began:
                raise JudgeWithdrawn("a stop came before its judgement began")
            try:  # begun: a stop lets it end and write its row
                result = await asyncio.to_thread(judge_sample, extracted, spec, gpu=self.config.gpu)
            finally:
                self._judge_slots.release()
        if meta:
            extra = {**extra, "response": meta}
        evaluation = add_judgement(self.db, result, sample.id, EVALUATION_SOURCE, extra or None)  # type: ignore[arg-type]
        self.report.judged += 1
        return evaluation

    async def _watch_stop(self) -> None:
        assert self.stop is not None and self.report is not None
        while not self.stop.requested:
            await asyncio.sleep(STOP_POLL_S)
        self._judged_at_stop = self.report.judged
        self._stopped.set()
        elsewhere = " (stop again to leave them for a resume)" if self.judge_elsewhere is not None else ""
        self.progress({"event": "log", "level": "info", "message": "stopping: no more requests or judgements; "
                       f"the judgements already running write their rows{elsewhere}"})

    async def _unless_stopped(self, work: Awaitable[T]) -> tuple[bool, T | None]:
        """(True, `work`'s result), or (False, None) when a stop comes first and `work` is cancelled."""
        task = asyncio.ensure_future(work)
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        finally:
            stopped.cancel()
        if not task.done():
            task.cancel()
        try:
            return True, await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
            return False, None

    def _fail(self, where: dict[str, Any], kind: str, message: str) -> None:
        assert self.report is not None
        failure = {**where, "kind": kind, "message": message}
        self.report.failures.append(failure)
        self.progress({"event": "failure", **failure})


def open_or_resume(db: sqlite_utils.Database, model: Model, name: str, source: str, context: str,
                   prompts: dict[str, Prompt], params: Callable[[dict[str, Any] | None], dict[str, Any]]
                   ) -> tuple[Run, bool]:
    """The model's run called `name`, resumed (its params brought up to date) or created: (run, resumed).
    RunMismatch when the run found was made with another context level, other prompts, or another turn
    budget: a run's budget is what its trajectories were run with, and the headline reads it (db/headline.py),
    so a rerun never rewrites it."""
    assert model.id is not None
    run = find_run(db, model.id, name)
    if run is None:
        return create_run(db, Run(model_id=model.id, name=name, source=source, context_level=context,
                                  prompt_version=PROMPT_VERSION, params=params(None))), False
    if run.context_level != context or run.prompt_version != PROMPT_VERSION:
        raise RunMismatch(f"run {run.id} ({run.name!r}) was made with context {run.context_level} and "
                          f"prompts {run.prompt_version}; choose another --run-name")
    asked, had = params(None).get("turns"), run.params.get("turns")
    if isinstance(asked, int) and isinstance(had, int) and asked != had and (
            run.finished_at or stored_turns(db, run.id)):  # type: ignore[arg-type]
        # A run that has nothing stored yet (one refused before its first reply) may still be asked anew.
        state = "finished" if run.finished_at else "unfinished"
        raise RunMismatch(f"run {run.id} ({run.name!r}, {state}) was made with {had} turns; --turns {asked} would "
                          f"change the budget its trajectories were run with: give --turns {had} to resume it, or "
                          "--run-name for a new run")
    stored = run.params.get("prompt_digests", {})
    changed = [t for t, p in prompts.items() if t in stored and stored[t] != p.digest]
    if changed:
        raise RunMismatch(f"the prompt of {', '.join(changed)} changed since run {run.id} started (the task "
                          "spec was edited); resuming would mix two prompts: choose another --run-name")
    update_run_params(db, run.id, params(run.params))  # type: ignore[arg-type]
    return run, True


def _static_no_candidate(spec: TaskSpec, why: str) -> Any:
    from ptxbench.engine.static import StaticVerdict

    reason = f"the endpoint's reply is not a chat completion: {why}"
    return StaticVerdict(category="no_candidate", stage="extract", arch=spec.arch, task_id=spec.id,
                         require=list(spec.families), evidence=reason, extract_evidence={"reason": reason})


def _was_malformed(evaluation: Evaluation | None) -> bool:
    return bool(evaluation is not None and ((evaluation.evidence or {}).get("response") or {}).get("malformed"))


def run_model(db: sqlite_utils.Database, config: RunConfig, *, progress: Progress | None = None,
              client: ChatClient | None = None, judge: TurnJudge | None = None,
              stop: RunStop | None = None) -> RunReport:
    """Run (or resume) a model run to completion, or until `stop`; the store keeps everything as it goes.
    `judge` judges the turns elsewhere (a pool or a cluster) instead of on this process's own worker."""
    async def main() -> RunReport:
        runner = ModelRun(db, config, progress=progress, client=client, judge=judge, stop=stop)
        runner.open_run()
        return await runner.execute()

    return asyncio.run(main())
