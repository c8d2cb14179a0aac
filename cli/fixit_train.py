"""`ptxbench fixit tiny | train | remeasure`: the training half of Fixit, on a local checkpoint.

The work is services/fixit_training.py; torch, transformers and peft are imported only inside
these commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ptxbench.cli.conventions import check_outputs, reported, write_file
from ptxbench.engine.inert import inert


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
    from ptxbench.services.fixit_training import build_tiny

    with reported("fixit tiny"):
        info = build_tiny(out, data=data, exclude_tasks=exclude_task, device=device, vocab_size=vocab, hidden=hidden,
                          layers=layers, heads=heads, seed=seed, pretrain_steps=pretrain_steps,
                          pretrain_seq=pretrain_seq)
    typer.echo(json.dumps(info))


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
    from ptxbench.services.fixit_training import train as run_train

    modules: Any = target_modules if target_modules == "all-linear" else tuple(
        m.strip() for m in target_modules.split(",") if m.strip())
    log = None if quiet else (lambda step, loss: typer.echo(f"step {step}: loss {loss:.4f}", err=True))
    with reported("fixit train"):
        summary = run_train(data, model_dir, out, log=log, steps=steps, lr=lr, batch_size=batch_size, max_len=max_len,
                            lora_r=lora_r, lora_alpha=lora_alpha, lora_dropout=lora_dropout, target_modules=modules,
                            seed=seed, device=device)
    typer.echo(json.dumps(summary))


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
    from ptxbench.services.fixit_training import remeasure as run_remeasure

    check_outputs("fixit remeasure", (out, markdown))  # before the long work, not after it
    with reported("fixit remeasure"):
        report, table = run_remeasure(
            data, model_dir, adapter, train_tasks=train_task, heldout_tasks=heldout_task, samples_per_task=samples,
            max_new_tokens=max_new_tokens, temperature=temperature, max_prompt_tokens=max_prompt_tokens,
            repair_examples=repair_examples, context=context, seed=seed, device=device,
            loss_max_len=max_prompt_tokens or 1024)
    write_file("fixit remeasure", out, json.dumps(report, indent=2, default=str))
    if markdown is not None:
        write_file("fixit remeasure", markdown, table)
    typer.echo(inert(table))  # it quotes what the models replied


COMMANDS = (("tiny", tiny), ("train", train), ("remeasure", remeasure))
