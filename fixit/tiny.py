"""A tiny local checkpoint to prove the Fixit loop without any download: a byte-level BPE
tokenizer trained here on the PTX corpus (the repository's expert kernels), and a small
Llama-style causal LM built from a config, optionally pre-trained for a few steps on the same
corpus. `ptxbench fixit tiny` and scripts/fixit_gpu.py use it; a user points `fixit train` at
a real checkpoint instead.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ptxbench.fixit.train import (
    BOS, CHAT_TEMPLATE, END, PAD, ROLE_TOKENS, TrainingError, autocast, quiet_transformers,
)


def ptx_corpus(extra: Iterable[str] = (), *, exclude_tasks: Iterable[str] = ()) -> list[str]:
    """The expert solutions' PTX and CUDA (the repository's own kernels), plus `extra` texts.
    Held-out tasks belong in `exclude_tasks`: a base model pre-trained on their kernels would
    have seen what it is later measured on."""
    from ptxbench.tasks.spec import all_tasks

    skip = set(exclude_tasks)
    texts: list[str] = []
    for spec in all_tasks():
        if spec.id in skip:
            continue
        folder = spec.expert_dir()
        if folder is None:
            continue
        for name in ("kernel.ptx", "kernel.cu"):
            path = folder / name
            if path.is_file():
                texts.append(path.read_text(encoding="utf-8", errors="replace"))
    texts.extend(t for t in extra if t)
    return texts


def train_tokenizer(texts: Sequence[str], vocab_size: int = 2048) -> Any:
    """A byte-level BPE tokenizer trained on `texts`, with the chat template above."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if not texts:
        raise TrainingError("no text to train a tokenizer on")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=[PAD, BOS, END, *ROLE_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=END, pad_token=PAD)
    fast.add_special_tokens({"additional_special_tokens": list(ROLE_TOKENS)})
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 1 << 20
    return fast


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int = 2048
    hidden: int = 64
    layers: int = 2
    heads: int = 4
    intermediate: int = 0           # 0: 2 × hidden … rounded
    max_positions: int = 16384
    seed: int = 0
    pretrain_steps: int = 0         # full-parameter causal-LM steps on the corpus before saving
    pretrain_seq: int = 256
    pretrain_batch: int = 8
    pretrain_lr: float = 3e-3
    pretrain_max_s: float | None = None   # stop pre-training early after this many seconds


def build_tiny_checkpoint(out_dir: Path | str, texts: Sequence[str], config: TinyConfig = TinyConfig(), *,
                          device: str | None = None) -> dict[str, Any]:
    """A small Llama-style causal LM built from a config (random weights, optionally
    pre-trained for a few steps on `texts`), saved with its tokenizer as a local checkpoint."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    quiet_transformers()
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    tokenizer = train_tokenizer(texts, config.vocab_size)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=config.hidden, intermediate_size=config.intermediate or 2 * config.hidden,
        num_hidden_layers=config.layers, num_attention_heads=config.heads, num_key_value_heads=config.heads,
        max_position_embeddings=config.max_positions, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(cfg)
    info: dict[str, Any] = {"params": sum(p.numel() for p in model.parameters()), "vocab": len(tokenizer),
                            "hidden": config.hidden, "layers": config.layers, "heads": config.heads}
    if config.pretrain_steps > 0:
        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        info["pretrain"] = _pretrain(model, tokenizer, texts, config, dev)
        model.to("cpu")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info["seconds"] = round(time.perf_counter() - started, 2)
    (out / "ptxbench_tiny.json").write_text(json.dumps({"made_by": "ptxbench.fixit.train.build_tiny_checkpoint",
                                                        "config": asdict(config), **info}, indent=2))
    return info


def _pretrain(model: Any, tokenizer: Any, texts: Sequence[str], config: TinyConfig, device: Any) -> dict[str, Any]:
    """Causal-LM steps on random windows of the corpus, so the base model knows PTX's shape."""
    import torch

    ids = [i for t in texts for i in tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]]
    data = torch.tensor(ids, dtype=torch.long)
    seq = min(config.pretrain_seq, len(ids) - 1)
    if seq < 8:
        raise TrainingError("the corpus is too small to pre-train on")
    gen = torch.Generator().manual_seed(config.seed)
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=config.pretrain_lr, weight_decay=0.0)
    losses = []
    started = time.perf_counter()
    for step in range(config.pretrain_steps):
        if config.pretrain_max_s is not None and step and time.perf_counter() - started > config.pretrain_max_s:
            break
        starts = torch.randint(0, len(ids) - seq, (config.pretrain_batch,), generator=gen)
        batch = torch.stack([data[s:s + seq] for s in starts.tolist()]).to(device)
        lr = config.pretrain_lr * min(1.0, (step + 1) / 20) * 0.5 * (1 + math.cos(math.pi * step / config.pretrain_steps))
        for g in opt.param_groups:
            g["lr"] = lr
        with autocast(device):
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    model.eval()
    return {"steps": len(losses), "seq": seq, "corpus_tokens": len(ids),
            "seconds": round(time.perf_counter() - started, 2),
            "loss_first": round(sum(losses[:5]) / min(5, len(losses)), 4),
            "loss_last": round(sum(losses[-5:]) / min(5, len(losses)), 4)}
