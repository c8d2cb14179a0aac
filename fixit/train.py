"""LoRA supervised fine-tuning on a Fixit set, with transformers and peft, from a local
checkpoint directory (nothing is downloaded).

`train_lora` takes any causal-LM checkpoint that `AutoModelForCausalLM` can load from a
folder (a user's real model) and a JSONL set from `ptxbench fixit export`; it learns the
last assistant message of each example (the explanation and the fixed kernel) and saves
the adapter with a JSON report. `tiny.py` makes a small local checkpoint (a model built
from a config, a tokenizer trained here) so the whole loop can be proved on a CPU or in a
minute on a GPU.

torch, transformers, peft and tokenizers are imported inside the functions: the rest
of PTXBench never needs them.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.fixit.export import Example, read_jsonl

ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
PAD, BOS, END = "<|pad|>", "<|bos|>", "<|end|>"
# A plain template: each message between its role token and <|end|>; generation starts
# after <|assistant|>. Real checkpoints keep their own template.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
REPORT_NAME = "fixit_train_report.json"


class TrainingError(RuntimeError):
    """Training cannot start (no data, a checkpoint that does not load …): the message says why."""


def require_training_stack() -> None:
    missing = []
    for name in ("torch", "transformers", "peft", "tokenizers"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise TrainingError(f"training needs {', '.join(missing)}: pip install 'ptxbench[train]' "
                            "(or pip install transformers peft torch)")


def autocast(device: Any) -> Any:
    """bf16 autocast on a CUDA device; nothing on the CPU."""
    import contextlib

    import torch

    if getattr(device, "type", str(device)) == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


# -- encoding examples ------------------------------------------------------------------------------

def check_checkpoint(model_dir: Path | str) -> Path:
    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise TrainingError(f"{path} is not a model checkpoint folder (no config.json)")
    return path


def load_tokenizer(model_dir: Path | str) -> Any:
    from transformers import AutoTokenizer

    path = check_checkpoint(model_dir)
    try:
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise TrainingError(f"cannot load the tokenizer in {path}: {exc}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if not getattr(tok, "chat_template", None):
        tok.chat_template = CHAT_TEMPLATE
    return tok


def encode_example(tokenizer: Any, messages: list[dict[str, str]], max_len: int) -> tuple[list[int], list[int]]:
    """Token ids and labels for one conversation: only the last message (and its end token)
    is learned. Longer than `max_len`, the prompt is cut from the front (its end — the
    judgement — stays) and the answer from the back, the answer keeping at least half."""
    prompt = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template(messages, tokenize=False)
    answer = full[len(prompt):] if full.startswith(prompt) else messages[-1]["content"] + (tokenizer.eos_token or "")
    p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    a_ids = tokenizer(answer, add_special_tokens=False)["input_ids"]
    if len(p_ids) + len(a_ids) > max_len:
        keep_a = min(len(a_ids), max(max_len // 2, max_len - len(p_ids)))
        keep_p = max_len - keep_a
        p_ids = p_ids[len(p_ids) - keep_p:] if keep_p > 0 else []
        a_ids = a_ids[:keep_a]
    return p_ids + a_ids, [-100] * len(p_ids) + a_ids


def _batches(encoded: list[tuple[list[int], list[int]]], pad_id: int, size: int) -> Iterable[tuple[Any, Any, Any]]:
    for i in range(0, len(encoded), size):
        chunk = encoded[i:i + size]
        yield _collate(chunk, pad_id)


def _collate(chunk: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[Any, Any, Any]:
    import torch

    width = max(len(ids) for ids, _ in chunk)
    ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
    labels = torch.full((len(chunk), width), -100, dtype=torch.long)
    mask = torch.zeros((len(chunk), width), dtype=torch.long)
    for row, (i, l) in enumerate(chunk):
        ids[row, :len(i)] = torch.tensor(i)
        labels[row, :len(l)] = torch.tensor(l)
        mask[row, :len(i)] = 1
    return ids, labels, mask


def eval_loss(model: Any, tokenizer: Any, examples: Sequence[Example], *, max_len: int = 512, batch_size: int = 8,
              device: Any = None) -> float | None:
    """Mean loss per learned token over `examples` (None for no examples)."""
    import torch

    if not examples:
        return None
    device = device or next(model.parameters()).device
    encoded = [encode_example(tokenizer, e.messages, max_len) for e in examples]
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for ids, labels, mask in _batches(encoded, tokenizer.pad_token_id, batch_size):
            ids, labels, mask = ids.to(device), labels.to(device), mask.to(device)
            with autocast(device):
                logits = model(input_ids=ids, attention_mask=mask).logits.float()
            shift_logits, shift_labels = logits[:, :-1], labels[:, 1:]
            loss = torch.nn.functional.cross_entropy(
                shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1), ignore_index=-100,
                reduction="sum")
            total += float(loss)
            count += int((shift_labels != -100).sum())
    if was_training:
        model.train()
    return total / count if count else None


# -- LoRA training ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainConfig:
    steps: int = 60
    lr: float = 2e-4
    batch_size: int = 4
    max_len: int = 1024
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    target_modules: str | tuple[str, ...] = "all-linear"
    warmup_steps: int = 5
    grad_clip: float = 1.0
    seed: int = 0
    device: str | None = None       # None: cuda when there is one, else cpu
    max_seconds: float | None = None  # stop early after this many seconds of steps (the report says how many ran)


@dataclass
class TrainReport:
    model_dir: str
    adapter_dir: str
    device: str
    steps: int
    seconds: float
    examples_train: int
    examples_val: int
    trainable_params: int
    total_params: int
    loss_first: float               # mean of the first five steps
    loss_last: float                # mean of the last five steps
    val_loss_before: float | None
    val_loss_after: float | None
    tokens_learned_per_step: float
    losses: list[float] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def quiet_transformers() -> None:
    """No download or loading progress bars in a command's output."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def load_base(model_dir: Path | str, device: Any = None) -> Any:
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    path = check_checkpoint(model_dir)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise TrainingError(f"cannot load the checkpoint in {path}: {exc}") from None
    return model.to(device) if device is not None else model


def train_lora(data: Path | str | Sequence[Example], model_dir: Path | str, out_dir: Path | str,
               config: TrainConfig = TrainConfig(), *, log: Any = None) -> TrainReport:
    """Fine-tune LoRA adapters on the `train` examples (the `val` ones measure the loss
    before and after); save the adapter, the tokenizer and `fixit_train_report.json` in `out_dir`."""
    require_training_stack()
    import torch
    from peft import LoraConfig, get_peft_model

    examples = read_jsonl(data) if isinstance(data, (str, Path)) else list(data)
    train = [e for e in examples if e.split == "train"]
    val = [e for e in examples if e.split == "val"]
    if not train:
        raise TrainingError("the set has no examples in its train split")
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    device = torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tokenizer = load_tokenizer(model_dir)
    base = load_base(model_dir, device)
    lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=list(config.target_modules) if not isinstance(config.target_modules, str)
                      else config.target_modules, task_type="CAUSAL_LM")
    model = get_peft_model(base, lora)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    encoded = [encode_example(tokenizer, e.messages, config.max_len) for e in train]
    val_before = eval_loss(model, tokenizer, val, max_len=config.max_len, device=device)

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr, weight_decay=0.0)
    rng = random.Random(config.seed)
    losses: list[float] = []
    learned = 0
    started = time.perf_counter()
    model.train()
    for step in range(config.steps):
        if config.max_seconds is not None and step and time.perf_counter() - started > config.max_seconds:
            break
        batch = [encoded[rng.randrange(len(encoded))] for _ in range(config.batch_size)]
        ids, labels, mask = (t.to(device) for t in _collate(batch, tokenizer.pad_token_id))
        for g in opt.param_groups:
            g["lr"] = config.lr * min(1.0, (step + 1) / max(1, config.warmup_steps))
        with autocast(device):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        if config.grad_clip:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], config.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 5))
        learned += int((labels[:, 1:] != -100).sum())
        if log is not None:
            log(step + 1, losses[-1])
    seconds = time.perf_counter() - started
    model.eval()
    val_after = eval_loss(model, tokenizer, val, max_len=config.max_len, device=device)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    head = losses[:5]
    tail = losses[-5:]
    report = TrainReport(
        model_dir=str(model_dir), adapter_dir=str(out), device=str(device), steps=len(losses),
        seconds=round(seconds, 2), examples_train=len(train), examples_val=len(val), trainable_params=trainable,
        total_params=total, loss_first=round(sum(head) / len(head), 4), loss_last=round(sum(tail) / len(tail), 4),
        val_loss_before=None if val_before is None else round(val_before, 4),
        val_loss_after=None if val_after is None else round(val_after, 4),
        tokens_learned_per_step=round(learned / max(1, len(losses)), 1), losses=losses,
        config={k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(config).items()},
    )
    (out / REPORT_NAME).write_text(json.dumps(report.to_dict(), indent=2))
    return report


def load_tuned(model_dir: Path | str, adapter_dir: Path | str, device: Any = None) -> tuple[Any, Any]:
    """The base checkpoint with the saved adapter on top, and the tokenizer, ready for inference.
    `with model.disable_adapter():` gives the base model's behaviour from the same object."""
    require_training_stack()
    import torch
    from peft import PeftModel

    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    base = load_base(model_dir, device)
    try:
        model = PeftModel.from_pretrained(base, str(adapter_dir))
    except (OSError, ValueError) as exc:
        raise TrainingError(f"cannot load the adapter in {adapter_dir}: {exc}") from None
    model.eval()
    return model, load_tokenizer(model_dir)
