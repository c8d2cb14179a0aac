"""Fixit through a model at an OpenAI-compatible endpoint: repairs (`fixit repair`) and
written explanations (`fixit explain`).

They glue the store (`ptxbench.db.fixit`), Fixit's records (`ptxbench.fixit`) and the
model-run machinery (`ptxbench.models`: the chat client, judging a stored sample, the
feedback a turn's judgement becomes), and keep every reply in the store before anything
else is done with it.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import sqlite_utils

from ptxbench.db.fixit import add_explanation, explanation_sources, load_sample
from ptxbench.fixit.explain import DERIVED_SOURCE, clean_model_explanation, derived_explanation, explain_messages
from ptxbench.fixit.export import DEFAULT_CONTEXT, candidate_text
from ptxbench.fixit.judgement import judgement_text
from ptxbench.fixit.pairing import REPAIR_SOURCE_PREFIX
from ptxbench.fixit.records import GPU_VERIFIED, STATIC_ONLY, FixitSample, Pair
from ptxbench.services.errors import UsageError

Progress = Callable[[dict[str, Any]], None]
REPAIR_EVALUATION_SOURCE = "ptxbench fixit repair"
REPAIR_ASK = ("First explain in a few sentences what is wrong and why your change fixes it. Then reply with the "
              "complete corrected kernel in one fenced code block (```ptx or ```cuda), plus the launch manifest in a "
              "```json block if you do not use the default launch.")


def feedback_for(db: sqlite_utils.Database, sample: FixitSample) -> str | None:
    """What a model run would have told the model about this sample's judgement (the same
    words, from ptxbench.models.refine), or None when that is not available."""
    try:
        from ptxbench.models.refine import feedback_message
    except ImportError:
        return None
    from ptxbench.db.queries import get_sample, latest_evaluation, measurements_for
    from ptxbench.tasks.spec import get_task

    evaluation = latest_evaluation(db, sample.id)
    if evaluation is None:
        return None
    try:
        task = get_task(sample.task_id)
    except (KeyError, ValueError):
        return None
    assert evaluation.id is not None  # read from the store
    return feedback_message(task, evaluation, measurements_for(db, evaluation.id), get_sample(db, sample.id))


def attach_feedback(db: sqlite_utils.Database, samples: list[FixitSample]) -> None:
    for s in samples:
        if s.feedback is None and s.train_failure:
            s.feedback = feedback_for(db, s)


# -- repair -----------------------------------------------------------------------------------------

@dataclass
class RepairReport:
    run_ids: dict[str, int] = field(default_factory=dict)
    attempted: int = 0
    repaired: int = 0              # a counting pair stored
    unverified: int = 0            # the repair passes statically only
    failed: int = 0                # no passing turn within the budget
    requests: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    categories: Counter = field(default_factory=Counter)
    fixes: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"run_ids": self.run_ids, "attempted": self.attempted, "repaired": self.repaired,
                "unverified": self.unverified, "failed": self.failed, "requests": self.requests,
                "errors": self.errors, "categories": dict(self.categories), "fixes": self.fixes}


@dataclass(frozen=True)
class RepairConfig:
    model: str
    base_url: str
    api_key: str | None = None
    turns: int = 2
    temperature: float | None = None
    max_tokens: int | None = None
    concurrency: int = 4
    timeout_s: float = 600.0
    retries: int = 6
    gpu: bool = False
    allow_static: bool = False
    context: str | None = None


class Repairer:
    """Repairs of failed samples by a (stronger) model: each failed kernel and its judgement go
    to the model, which answers with an explanation and a fixed kernel; each answer is stored
    as a sample of a `fixit repair` run, judged, and — when it passes the train sizes — stored
    as a fix of the failed sample. Up to `turns` answers per failed sample, each told its own
    judgement."""

    def __init__(self, db: sqlite_utils.Database, config: RepairConfig, progress: Progress | None = None) -> None:
        self.db = db
        self.config = config
        self.progress = progress or (lambda e: None)
        self.report = RepairReport()
        self._runs: dict[str, Any] = {}
        self._judge_slot = asyncio.Semaphore(1)

    def _run_for(self, level: str) -> Any:
        from ptxbench.db.records import Run
        from ptxbench.db.writes import create_run, get_or_create_model
        from ptxbench.tasks.prompts import PROMPT_VERSION

        if level not in self._runs:
            cfg = self.config
            model = get_or_create_model(self.db, f"{cfg.model} (fixit repair)", kind="model",
                                        source=f"model:{cfg.model} via {cfg.base_url}", endpoint=cfg.base_url)
            run = create_run(self.db, Run(model_id=model.id, name=f"fixit repair · {cfg.model} · {level}",  # type: ignore[arg-type]
                                          source="ptxbench fixit repair", context_level=level,
                                          prompt_version=PROMPT_VERSION,
                                          params={"base_url": cfg.base_url, "turns": cfg.turns, "gpu": cfg.gpu,
                                                  "temperature": cfg.temperature, "max_tokens": cfg.max_tokens}))
            self._runs[level] = run
            assert run.id is not None  # written just now
            self.report.run_ids[level] = run.id
        return self._runs[level]

    async def repair_all(self, failed: list[FixitSample]) -> RepairReport:
        from ptxbench.models.client import ChatClient, ClientConfig

        cfg = self.config
        client = ChatClient(ClientConfig(base_url=cfg.base_url, model=cfg.model, api_key=cfg.api_key,
                                         temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                                         timeout_s=cfg.timeout_s, retries=cfg.retries, concurrency=cfg.concurrency))
        try:
            results = await asyncio.gather(*(self._repair(client, f) for f in failed), return_exceptions=True)
        finally:
            await client.close()
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return self.report

    async def _repair(self, client: Any, failed: FixitSample) -> None:
        from ptxbench.db.records import Fix, Sample
        from ptxbench.db.writes import add_fix
        from ptxbench.db.judgement import add_judgement
        from ptxbench.models.judging import JudgeFailed, candidate_of, fill_candidate, judge_sample
        from ptxbench.models.refine import assistant_text
        from ptxbench.tasks.prompts import build_prompt
        from ptxbench.tasks.spec import get_task

        cfg = self.config
        spec = get_task(failed.task_id)
        level = cfg.context or (failed.context_level if failed.run_id is not None else DEFAULT_CONTEXT)
        run = self._run_for(level)
        verdict = feedback_for(self.db, failed) or judgement_text(failed, closing=False)
        messages = build_prompt(spec, level).messages() + [
            {"role": "assistant", "content": candidate_text(failed)},
            {"role": "user", "content": f"{verdict}\n\n{REPAIR_ASK}"},
        ]
        self.report.attempted += 1
        parent: int | None = None
        for turn in range(1, cfg.turns + 1):
            result = await client.complete(messages)
            if not result.answered:
                self.report.errors.append({"failed_sample_id": failed.id, "turn": turn, "error": result.error})
                self.report.failed += 1
                return
            self.report.requests += 1
            sample = Sample(task_id=spec.id, language="none", code="", response=result.content or "",
                            source=f"fixit repair of sample {failed.id} by model:{cfg.model}", run_id=run.id,
                            sample_index=failed.id, turn=turn, parent_id=parent, tokens_in=result.tokens_in,
                            tokens_out=result.tokens_out, latency_s=result.latency_s)
            from ptxbench.db.writes import add_sample

            sample = add_sample(self.db, sample)
            # Extracting reads the whole reply: in a thread, so that no reply holds up the event loop.
            extracted = (candidate_of(sample, result.malformed) if result.malformed else
                         fill_candidate(self.db, sample, await asyncio.to_thread(candidate_of, sample)))
            try:
                async with self._judge_slot:
                    judged = await asyncio.to_thread(judge_sample, extracted, spec, gpu=cfg.gpu)
            except JudgeFailed as exc:
                self.report.errors.append({"failed_sample_id": failed.id, "turn": turn, "error": str(exc)})
                self.report.failed += 1
                return
            evaluation = add_judgement(self.db, judged, sample.id, REPAIR_EVALUATION_SOURCE)  # type: ignore[arg-type]
            self.report.categories[evaluation.category] += 1
            assert sample.id is not None  # written just now
            repaired = load_sample(self.db, sample.id)
            assert repaired is not None
            event = {"event": "turn", "failed_sample_id": failed.id, "turn": turn, "sample_id": sample.id,
                     "category": evaluation.category, "verification": repaired.verification}
            self.progress(event)
            counts = repaired.verification == GPU_VERIFIED or (cfg.allow_static and repaired.verification == STATIC_ONLY)
            if counts:
                pair = Pair(failed, repaired, "repair")
                written = clean_model_explanation(_prose(result.content))
                fix = add_fix(self.db, Fix(
                    failed_sample_id=failed.id, fixed_sample_id=sample.id,
                    explanation=written or derived_explanation(pair),
                    explanation_source=f"model:{cfg.model} (repair reply)" if written else DERIVED_SOURCE,
                    source=f"{REPAIR_SOURCE_PREFIX}model:{cfg.model}" + ("" if repaired.verification == GPU_VERIFIED
                                                                        else " (static only)")))
                self.report.repaired += 1
                self.report.fixes.append(fix.id)  # type: ignore[arg-type]
                return
            if repaired.verification == STATIC_ONLY:
                self.report.unverified += 1  # passes statically; with no GPU it cannot count
                return
            messages = messages + [
                {"role": "assistant", "content": assistant_text(result.content, bool(result.malformed))},
                {"role": "user", "content": (feedback_for(self.db, repaired) or judgement_text(repaired))},
            ]
            parent = sample.id
        self.report.failed += 1


def _prose(text: str | None) -> str:
    """A reply without its code blocks (what it says about the fix)."""
    return clean_model_explanation(text, max_chars=10_000) or ""


# -- written explanations ---------------------------------------------------------------------------

@dataclass
class ExplainReport:
    asked: int = 0
    written: int = 0
    empty: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    derived: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"asked": self.asked, "written": self.written, "empty": self.empty, "errors": self.errors,
                "derived": self.derived}


def has_model_explanation(db: sqlite_utils.Database, pair: Pair) -> bool:
    return any(s.startswith("model:") for s in explanation_sources(db, pair.failed.id, pair.fixed.id))


async def explain_pairs(db: sqlite_utils.Database, pairs: list[Pair], *, model: str, base_url: str,
                        api_key: str | None = None, temperature: float | None = None, max_tokens: int | None = None,
                        concurrency: int = 4, timeout_s: float = 600.0, retries: int = 6,
                        progress: Progress | None = None) -> ExplainReport:
    """Ask `model` to explain each pair; every usable answer becomes another explanation of
    the pair (`explanation_source` = `model:NAME`)."""
    from ptxbench.models.client import ChatClient, ClientConfig
    from ptxbench.tasks.spec import get_task

    report = ExplainReport()
    note = progress or (lambda e: None)
    client = ChatClient(ClientConfig(base_url=base_url, model=model, api_key=api_key, temperature=temperature,
                                     max_tokens=max_tokens, concurrency=concurrency, timeout_s=timeout_s,
                                     retries=retries))

    async def one(pair: Pair) -> None:
        report.asked += 1
        title = get_task(pair.task_id).title
        result = await client.complete(explain_messages(pair, title))
        if not result.ok:
            report.errors.append({"pair": list(pair.key), "error": result.error or result.malformed})
            return
        text = clean_model_explanation(result.content)
        if text is None:
            report.empty += 1
            note({"event": "empty", "pair": list(pair.key)})
            return
        add_explanation(db, pair, text, f"model:{model}")
        report.written += 1
        note({"event": "written", "pair": list(pair.key)})

    try:
        results = await asyncio.gather(*(one(p) for p in pairs), return_exceptions=True)
    finally:
        await client.close()
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return report


def derive_missing(db: sqlite_utils.Database, pairs: list[Pair]) -> ExplainReport:
    """A derived explanation for every pair that has none yet (no model configured)."""
    report = ExplainReport()
    for pair in pairs:
        if DERIVED_SOURCE in explanation_sources(db, pair.failed.id, pair.fixed.id):
            continue
        add_explanation(db, pair, derived_explanation(pair), DERIVED_SOURCE)
        report.derived += 1
    return report


# -- what the front ends call ------------------------------------------------------------------------

def api_key(env: str | None) -> str | None:
    """The key held by the variable `env` names (None: no key); UsageError when it is not set."""
    if env is None:
        return None
    value = os.environ.get(env)
    if not value:
        raise UsageError(f"--api-key-env {env}: the variable is not set")
    return value


def repair(db: sqlite_utils.Database, config: RepairConfig, targets: list[FixitSample],
           progress: Progress | None = None) -> RepairReport:
    """Ask the model to repair each target (services/fixit.py `repair_targets`); EndpointError when
    the endpoint refuses."""
    return asyncio.run(Repairer(db, config, progress).repair_all(targets))


def explain(db: sqlite_utils.Database, pairs: list[Pair], *, limit: int = 200, redo: bool = False,
            model: str | None = None, base_url: str | None = None, **client: Any) -> ExplainReport:
    """With no model, a derived explanation for each pair that has none; with one, the model asked
    about the pairs it has not explained yet (all of them with `redo`). `client`: api_key,
    temperature, max_tokens, concurrency. EndpointError when the endpoint refuses."""
    if (model is None) != (base_url is None):
        raise UsageError("--model and --base-url go together (leave both out for derived explanations)")
    if model is None or base_url is None:
        return derive_missing(db, pairs[:limit])
    todo = [p for p in pairs if redo or not has_model_explanation(db, p)][:limit]
    return asyncio.run(explain_pairs(db, todo, model=model, base_url=base_url, **client))
