"""LoRA training on the CPU with a tiny model built from a config and a tokenizer trained here:
the loss falls, the adapter saves and reloads to the same outputs, and re-measuring runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixit_data import expert_code, pair_of, rec, variants

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # peft asks transformers a deprecated question
pytest.importorskip("peft")
pytest.importorskip("transformers")

from ptxbench.fixit.export import build_examples, write_jsonl  # noqa: E402
from ptxbench.fixit.select import SelectConfig, select_pairs  # noqa: E402
from ptxbench.fixit.tiny import TinyConfig, build_tiny_checkpoint, ptx_corpus, train_tokenizer  # noqa: E402
from ptxbench.fixit.train import (  # noqa: E402
    REPORT_NAME, TrainConfig, encode_example, eval_loss, load_tuned, train_lora,
)

VADD = expert_code("vector_add_smoke")
RMS = expert_code("rmsnorm_bf16_sm90a")


def _prompt(task_id: str, level: str) -> tuple[str, str]:
    # a short prompt keeps the CPU test quick; the real prompts are tested in test_fixit_export
    return f"You write PTX for {task_id}.", f"# Task `{task_id}`\nWrite the kernel ({level})."


def _set(tmp: Path) -> tuple[Path, list]:
    pairs = []
    for base, task_id, cats, start in ((VADD, "vector_add_smoke", ("syntax", "wrong_result"), 0),
                                       (RMS, "rmsnorm_bf16_sm90a", ("hang_timeout",), 50)):
        fixed = rec(10_000 + start, task_id, base, category="ok", kind="expert", model="expert")
        for i, code in enumerate(variants(base, 6, start=start)):
            pairs.append(pair_of(rec(start + i, task_id, code, category=cats[i % len(cats)]), fixed, "expert"))
    sel = select_pairs(pairs, SelectConfig(val_fraction=0.25, heldout_tasks=("rmsnorm_bf16_sm90a",)))
    examples = build_examples(sel, prompt_for=_prompt)
    path = tmp / "set.jsonl"
    write_jsonl(path, examples)
    return path, examples


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path, list]:
    tmp = tmp_path_factory.mktemp("fixit-train")
    data, examples = _set(tmp)
    build_tiny_checkpoint(tmp / "base", ptx_corpus([e.messages[-1]["content"] for e in examples]),
                          TinyConfig(vocab_size=768, hidden=64, layers=2, heads=4))
    return tmp, data, examples


def test_tokenizer_and_encoding():
    tok = train_tokenizer(ptx_corpus(), vocab_size=600)
    ids = tok(VADD, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == VADD and len(ids) < 0.75 * len(VADD)  # merges learned from PTX
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": "fixed kernel"}]
    ids, labels = encode_example(tok, messages, 512)
    learned = [i for i, l in zip(ids, labels) if l != -100]
    assert tok.decode(learned) == "fixed kernel<|end|>\n"
    assert labels[: len(ids) - len(learned)] == [-100] * (len(ids) - len(learned))
    long = messages[:2] + [{"role": "assistant", "content": VADD}]
    ids, labels = encode_example(tok, [{"role": "user", "content": VADD}] + long[1:], 64)
    assert len(ids) == 64 and sum(1 for l in labels if l != -100) >= 32


def test_lora_loss_falls_and_the_adapter_reloads(tiny):
    tmp, data, examples = tiny
    report = train_lora(data, tmp / "base", tmp / "adapter",
                        TrainConfig(steps=40, lr=5e-3, batch_size=4, max_len=256, lora_r=8, seed=0, device="cpu"))
    assert report.steps == 40 and len(report.losses) == 40
    assert report.loss_last < report.loss_first - 0.3, report.losses
    assert report.val_loss_after < report.val_loss_before
    assert 0 < report.trainable_params < report.total_params / 2
    saved = json.loads((tmp / "adapter" / REPORT_NAME).read_text())
    assert saved["loss_last"] == report.loss_last and (tmp / "adapter" / "adapter_config.json").is_file()

    # reloaded: the same outputs as the model that finished training, and the base without the adapter
    model, tok = load_tuned(tmp / "base", tmp / "adapter", device="cpu")
    val = [e for e in examples if e.split == "val"]
    assert eval_loss(model, tok, val, max_len=256) == pytest.approx(report.val_loss_after, abs=1e-3)
    with model.disable_adapter():
        assert eval_loss(model, tok, val, max_len=256) == pytest.approx(report.val_loss_before, abs=1e-3)


def test_commands_train_and_remeasure(tiny):
    tmp, data, _ = tiny
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}

    def fixit(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ptxbench.cli.main", "fixit", *args], capture_output=True,
                              text=True, timeout=300, env=env)

    proc = fixit("train", "--data", str(data), "--model-dir", str(tmp / "base"), "--out", str(tmp / "cli-adapter"),
                 "--steps", "3", "--max-len", "128", "--lr", "1e-3", "--device", "cpu", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["steps"] == 3
    out = tmp / "remeasure.json"
    proc = fixit("remeasure", "--data", str(data), "--model-dir", str(tmp / "base"), "--adapter",
                 str(tmp / "cli-adapter"), "--out", str(out), "--markdown", str(tmp / "remeasure.md"), "--samples", "1",
                 "--max-new-tokens", "12", "--max-prompt-tokens", "128", "--repair-examples", "2", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["task_splits"] == {"train": ["vector_add_smoke"], "heldout": ["rmsnorm_bf16_sm90a"]}
    for variant in ("base", "tuned"):
        assert set(report["fresh"][variant]) == {"train", "heldout"}
        assert report["fresh"][variant]["train"]["n"] == 1
        assert set(report["repair"][variant]) == {"val", "heldout"}
        assert report["loss"][variant]["train"] is not None
    assert "base → tuned" in (tmp / "remeasure.md").read_text()
    # a checkpoint folder that is not one is a clear error
    proc = fixit("train", "--data", str(data), "--model-dir", str(tmp), "--out", str(tmp / "x"), "--steps", "1")
    assert proc.returncode == 1 and "not a model checkpoint" in proc.stderr
