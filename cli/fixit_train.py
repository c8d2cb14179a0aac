"""`ptxbench fixit tiny | train | remeasure`: the training half of Fixit, on a local checkpoint.

torch, transformers and peft are imported only inside these commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

EXIT_FAILED = 1
EXIT_USAGE = 2


def _fail(message: str, code: int = EXIT_USAGE) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _read_set(path: Path) -> list[Any]:
    from ptxbench.engine.fixit.export import read_jsonl

    if not path.is_file():
        _fail(f"{path}: no such file")
    try:
        return read_jsonl(path)
    except ValueError as exc:
        _fail(str(exc))
    return []


def tiny(
    out: Annotated[Path, typer.Argument(help="folder for the checkpoint (config, weights, tokenizer)")],
    data: Annotated[Optional[Path], typer.Option("--data", help="also train the tokenizer on this set's train split")] = None,
    vocab: Annotated[int, typer.Option("--vocab", min=300)] = 2048,
    hidden: Annotated[int, typer.Option("--hidden", min=16)] = 64,
    layers: Annotated[int, typer.Option("--layers", min=1)] = 2,
    heads: Annotated[int, typer.Option("--heads", min=1)] = 4,
    pretrain_steps: Annotated[int, typer.Option("--pretrain-steps", min=0, help="causal-LM steps on the PTX corpus")] = 0,
    pretrain_seq: Annotated[int, typer.Option("--pretrain-seq", min=16)] = 256,
    exclude_task: Annotated[Optional[list[str]], typer.Option("--exclude-task", help="leave this task's expert kernel out of the corpus (repeatable; with --data, the set's held-out tasks are left out too)")] = None,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    device: Annotated[Optional[str], typer.Option("--device", help="cpu or cuda (default: cuda when there is one)")] = None,
) -> None:
    """Build a tiny local checkpoint to prove the loop.

    A small Llama-style model from a config, with a BPE tokenizer trained here on the PTX
    corpus (the expert kernels, and the set's train split with --data)."""
    from ptxbench.engine.fixit.tiny import TinyConfig, build_tiny_checkpoint, ptx_corpus
    from ptxbench.engine.fixit.train import TrainingError, require_training_stack

    if hidden % heads:
        _fail("--hidden must be a multiple of --heads")
    try:
        require_training_stack()
    except TrainingError as exc:
        _fail(str(exc), EXIT_FAILED)
    # Only the train split, and no held-out task's expert kernel: what the base model learns from
    # must not include what it is later measured on.
    examples = _read_set(data) if data is not None else []
    extra = [m["content"] for e in examples if e.split == "train" for m in e.messages[2:]]
    excluded = set(exclude_task or ()) | set(task_splits_of(examples)["heldout"])
    config = TinyConfig(vocab_size=vocab, hidden=hidden, layers=layers, heads=heads, seed=seed,
                        pretrain_steps=pretrain_steps, pretrain_seq=pretrain_seq)
    try:
        info = build_tiny_checkpoint(out, ptx_corpus(extra, exclude_tasks=excluded), config, device=device)
    except TrainingError as exc:
        _fail(str(exc), EXIT_FAILED)
    typer.echo(json.dumps({"checkpoint": str(out), "corpus_excludes": sorted(excluded), **info}))


def train(
    data: Annotated[Path, typer.Option("--data", help="a set from `ptxbench fixit export`")],
    model_dir: Annotated[Path, typer.Option("--model-dir", help="local checkpoint folder (config.json, weights, tokenizer)")],
    out: Annotated[Path, typer.Option("--out", help="folder for the LoRA adapter and its report")],
    steps: Annotated[int, typer.Option("--steps", min=1)] = 60,
    lr: Annotated[float, typer.Option("--lr")] = 2e-4,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1)] = 4,
    max_len: Annotated[int, typer.Option("--max-len", min=32, help="tokens per example (prompt cut from the front)")] = 1024,
    lora_r: Annotated[int, typer.Option("--lora-r", min=1)] = 8,
    lora_alpha: Annotated[int, typer.Option("--lora-alpha", min=1)] = 16,
    lora_dropout: Annotated[float, typer.Option("--lora-dropout", min=0.0, max=0.9)] = 0.0,
    target_modules: Annotated[str, typer.Option("--target-modules", help="all-linear, or names joined by commas")] = "all-linear",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    device: Annotated[Optional[str], typer.Option("--device")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="no per-step loss lines")] = False,
) -> None:
    """LoRA fine-tuning of a local checkpoint on a Fixit set.

    Learns the set's train split (its val split is scored before and after); the adapter, the
    tokenizer and fixit_train_report.json go to --out."""
    from ptxbench.engine.fixit.train import TrainConfig, TrainingError, train_lora

    examples = _read_set(data)
    modules: Any = target_modules if target_modules == "all-linear" else tuple(
        m.strip() for m in target_modules.split(",") if m.strip())
    config = TrainConfig(steps=steps, lr=lr, batch_size=batch_size, max_len=max_len, lora_r=lora_r,
                         lora_alpha=lora_alpha, lora_dropout=lora_dropout, target_modules=modules, seed=seed,
                         device=device)
    log = None if quiet else (lambda step, loss: typer.echo(f"step {step}: loss {loss:.4f}", err=True))
    try:
        report = train_lora(examples, model_dir, out, config, log=log)
    except TrainingError as exc:
        _fail(str(exc), EXIT_FAILED)
    summary = {k: v for k, v in report.to_dict().items() if k != "losses"}
    typer.echo(json.dumps(summary))


def task_splits_of(examples: list[Any]) -> dict[str, list[str]]:
    """Train tasks and held-out tasks as the set split them (a task held out by size stays a train task)."""
    train = sorted({e.meta["task_id"] for e in examples if e.split in ("train", "val")})
    held = sorted({e.meta["task_id"] for e in examples if e.split == "heldout"
                   and not str(e.meta.get("heldout_reason") or "").startswith("fails only")} - set(train))
    return {"train": train, "heldout": held}


def remeasure(
    data: Annotated[Path, typer.Option("--data", help="the set the adapter was trained on")],
    model_dir: Annotated[Path, typer.Option("--model-dir", help="the base checkpoint")],
    adapter: Annotated[Path, typer.Option("--adapter", help="the adapter from `fixit train`")],
    out: Annotated[Path, typer.Option("--out", help="the JSON report to write")],
    markdown: Annotated[Optional[Path], typer.Option("--markdown", help="also write the side-by-side tables here")] = None,
    train_task: Annotated[Optional[list[str]], typer.Option("--train-task", help="tasks of the train split (default: the set's)")] = None,
    heldout_task: Annotated[Optional[list[str]], typer.Option("--heldout-task", help="tasks of the held-out split (default: the set's)")] = None,
    samples: Annotated[int, typer.Option("--samples", min=1, help="replies per task prompt")] = 2,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", min=1)] = 256,
    temperature: Annotated[float, typer.Option("--temperature", min=0.0)] = 0.8,
    max_prompt_tokens: Annotated[Optional[int], typer.Option("--max-prompt-tokens", help="cut prompts from the front")] = None,
    repair_examples: Annotated[int, typer.Option("--repair-examples", min=0)] = 16,
    context: Annotated[str, typer.Option("--context")] = "brief",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    device: Annotated[Optional[str], typer.Option("--device")] = None,
) -> None:
    """Base vs tuned, side by side, on train and held-out tasks.

    Both generate for the task prompts and the set's own repair conversations; the static
    engine judges every reply."""
    from ptxbench.engine.fixit.remeasure import RemeasureConfig, remeasure as run_remeasure, report_markdown
    from ptxbench.engine.fixit.train import TrainingError
    from ptxbench.tasks.spec import task_ids

    examples = _read_set(data)
    splits = task_splits_of(examples)
    if train_task:
        splits["train"] = list(train_task)
    if heldout_task:
        splits["heldout"] = list(heldout_task)
    unknown = sorted(set(splits["train"] + splits["heldout"]) - set(task_ids()))
    if unknown:
        _fail(f"unknown task {', '.join(unknown)}")
    if context not in ("none", "brief", "full"):
        _fail("--context must be none, brief or full")
    config = RemeasureConfig(samples_per_task=samples, max_new_tokens=max_new_tokens, temperature=temperature,
                             max_prompt_tokens=max_prompt_tokens, repair_examples=repair_examples, context=context,
                             seed=seed, device=device, loss_max_len=max_prompt_tokens or 1024)
    try:
        report = run_remeasure(str(model_dir), str(adapter), task_splits=splits, examples=examples, config=config)
    except TrainingError as exc:
        _fail(str(exc), EXIT_FAILED)
    out.write_text(json.dumps(report, indent=2, default=str))
    table = report_markdown(report)
    if markdown is not None:
        markdown.write_text(table)
    typer.echo(table)


def register(app: typer.Typer) -> None:
    app.command("tiny")(tiny)
    app.command("train")(train)
    app.command("remeasure")(remeasure)
