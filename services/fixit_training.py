"""Fixit's training half on a local checkpoint: a tiny checkpoint to prove the loop, LoRA
fine-tuning on an exported set, and base vs tuned re-measured side by side.

torch, transformers and peft are imported only when one of these runs (ptxbench.fixit.train).
A training stack that is missing or a checkpoint that does not load is a ToolError; a set that
cannot be read, a UsageError.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ptxbench.services.catalogue import require_context, task_ids
from ptxbench.services.errors import ToolError, UsageError


def read_set(path: Path) -> list[Any]:
    """The examples of a set written by `ptxbench fixit export`."""
    from ptxbench.fixit.export import read_jsonl

    if not path.is_file():
        raise UsageError(f"{path}: no such file")
    try:
        return read_jsonl(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def task_splits_of(examples: list[Any]) -> dict[str, list[str]]:
    """Train tasks and held-out tasks as the set split them (a task held out by size stays a train task)."""
    train = sorted({e.meta["task_id"] for e in examples if e.split in ("train", "val")})
    held = sorted(
        {
            e.meta["task_id"]
            for e in examples
            if e.split == "heldout" and not str(e.meta.get("heldout_reason") or "").startswith("fails only")
        }
        - set(train)
    )
    return {"train": train, "heldout": held}


def build_tiny(
    out: Path,
    *,
    data: Path | None = None,
    exclude_tasks: list[str] | None = None,
    device: str | None = None,
    **config: Any,
) -> dict[str, Any]:
    """A small Llama-style checkpoint with a BPE tokenizer trained here on the PTX corpus (the expert
    kernels, and with `data` the set's train split). No held-out task's kernel is in the corpus:
    what the base model learns from must not include what it is later measured on. `config`:
    TinyConfig's fields (vocab_size, hidden, layers, heads, seed, pretrain_steps, pretrain_seq)."""
    from ptxbench.fixit.tiny import TinyConfig, build_tiny_checkpoint, ptx_corpus
    from ptxbench.fixit.train import TrainingError, require_training_stack

    if config.get("hidden", 64) % config.get("heads", 4):
        raise UsageError("--hidden must be a multiple of --heads")
    try:
        require_training_stack()
    except TrainingError as exc:
        raise ToolError(str(exc)) from None
    examples = read_set(data) if data is not None else []
    extra = [m["content"] for e in examples if e.split == "train" for m in e.messages[2:]]
    excluded = set(exclude_tasks or ()) | set(task_splits_of(examples)["heldout"])
    try:
        info = build_tiny_checkpoint(
            out, ptx_corpus(extra, exclude_tasks=excluded), TinyConfig(**config), device=device
        )
    except TrainingError as exc:
        raise ToolError(str(exc)) from None
    return {"checkpoint": str(out), "corpus_excludes": sorted(excluded), **info}


def train(data: Path, model_dir: Path, out: Path, *, log: Any = None, **config: Any) -> dict[str, Any]:
    """LoRA fine-tuning of `model_dir` on the set's train split (its val split scored before and
    after); the adapter, the tokenizer and fixit_train_report.json go to `out`. Returns the report
    without its per-step losses. `config`: TrainConfig's fields."""
    from ptxbench.fixit.train import TrainConfig, TrainingError, train_lora

    examples = read_set(data)
    try:
        report = train_lora(examples, model_dir, out, TrainConfig(**config), log=log)
    except TrainingError as exc:
        raise ToolError(str(exc)) from None
    return {k: v for k, v in report.to_dict().items() if k != "losses"}


def remeasure(
    data: Path,
    model_dir: Path,
    adapter: Path,
    *,
    train_tasks: list[str] | None = None,
    heldout_tasks: list[str] | None = None,
    **config: Any,
) -> tuple[dict[str, Any], str]:
    """Base vs tuned on the train and held-out tasks (the set's, unless given): both generate for the
    task prompts and the set's repair conversations; the static engine judges every reply. Returns
    (the report, its side-by-side tables in Markdown). `config`: RemeasureConfig's fields."""
    from ptxbench.fixit.remeasure import RemeasureConfig, report_markdown
    from ptxbench.fixit.remeasure import remeasure as run_remeasure
    from ptxbench.fixit.train import TrainingError

    examples = read_set(data)
    splits = task_splits_of(examples)
    if train_tasks:
        splits["train"] = list(train_tasks)
    if heldout_tasks:
        splits["heldout"] = list(heldout_tasks)
    unknown = sorted(set(splits["train"] + splits["heldout"]) - set(task_ids()))
    if unknown:
        raise UsageError(f"unknown task {', '.join(unknown)}")
    require_context(config.get("context", "brief"))
    try:
        wanted: dict[str, Sequence[str]] = dict(splits)
        report = run_remeasure(
            str(model_dir), str(adapter), task_splits=wanted, examples=examples, config=RemeasureConfig(**config)
        )
    except TrainingError as exc:
        raise ToolError(str(exc)) from None
    return report, report_markdown(report)
