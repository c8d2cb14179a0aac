"""Agent runs: a model works on each task with the judge's tools, through its endpoint's function calling.

`ptxbench run --agent` comes here (models/agent.py does the episodes). The GPU stages are the
same rule as for a plain run (`--gpu auto|on|off`); the tools are told which archs have a device
here, so `check` and `time` say `skipped: no sm_90a device` rather than run anything elsewhere.
`context_tokens` is the conversation's stated budget: past it the episode's history is compacted.
An endpoint without function calling is refused with a message that says so, unless a fallback is
asked for: `turns` runs the plain multi-turn mode with the same reply budget instead.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import sqlite_utils

from ptxbench.models.agent import AgentBudget, AgentConfig, AgentReport, ToolCallingUnsupported, run_agent
from ptxbench.models.generate import RunConfig, RunReport, run_model
from ptxbench.services.errors import UsageError
from ptxbench.services.hardware import gpu_archs
from ptxbench.services.runs import checked_request

__all__ = ["AgentBudget", "AgentConfig", "AgentOutcome", "FALLBACKS", "ToolCallingUnsupported", "agent_configs", "run"]

FALLBACKS = ("none", "turns")


@dataclass
class AgentOutcome:
    report: AgentReport | None  # the agent run (None when it fell back before any episode stored)
    fallback: RunReport | None = None  # the plain multi-turn run made instead, when asked for
    why_fallback: str | None = None


def agent_configs(
    *,
    model: str,
    base_url: str,
    tasks: str = "all",
    arch: str | None = None,
    context: str = "none",
    gpu: str = "auto",
    api_key_env: str | None = None,
    run_name: str | None = None,
    tool_calls: int = 24,
    turns: int = 8,
    tokens: int | None = None,
    wall_s: float = 1800.0,
    gpu_s: float = 600.0,
    context_tokens: int | None = None,
    **options: Any,
) -> list[AgentConfig]:
    """One AgentConfig per context level. UsageError for a bad level, task list, budget or `--gpu` mode.
    `options` are the rest of AgentConfig's fields (samples, temperature, concurrency …)."""
    levels, task_list, use_gpu = checked_request(
        tasks=tasks, arch=arch, context=context, gpu=gpu, api_key_env=api_key_env, run_name=run_name
    )
    try:
        budget = AgentBudget(
            tool_calls=tool_calls, turns=turns, tokens=tokens, wall_s=wall_s, gpu_s=gpu_s, context_tokens=context_tokens
        )
    except ValueError as exc:
        raise UsageError(f"budget: {exc}") from None
    archs = tuple(gpu_archs() or ()) if use_gpu else ()
    return [
        AgentConfig(
            model=model,
            base_url=base_url,
            tasks=tuple(task_list),
            context=level,
            budget=budget,
            api_key_env=api_key_env,
            run_name=run_name,
            gpu=use_gpu,
            gpu_archs=archs,
            **options,
        )
        for level in levels
    ]


def plain_config(config: AgentConfig) -> RunConfig:
    """The plain multi-turn run standing in for an agent run: the same model, tasks and level, as
    many turns as the agent had replies."""
    plain = {f.name: getattr(config, f.name) for f in fields(RunConfig) if f.name not in ("run_name", "turns")}
    return RunConfig(**plain, turns=config.budget.turns)


def run(
    db: sqlite_utils.Database, config: AgentConfig, *, fallback: str = "none", progress: Any = None
) -> AgentOutcome:
    """One agent run. Raises ToolCallingUnsupported (unless `fallback` is `turns`), RunMismatch,
    EndpointError and StoreError as a plain run does."""
    if fallback not in FALLBACKS:
        raise UsageError(f"--agent-fallback: use {' or '.join(FALLBACKS)}")
    try:
        return AgentOutcome(run_agent(db, config, progress=progress))
    except ToolCallingUnsupported as exc:
        if fallback != "turns":
            raise
        if progress is not None:
            progress({"event": "fallback", "to": "turns", "why": str(exc)})
        return AgentOutcome(None, run_model(db, plain_config(config), progress=progress), str(exc))
