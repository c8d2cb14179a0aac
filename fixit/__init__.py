"""Fixit: a model's failed kernels paired with fixed ones, explained, exported as a
balanced fine-tuning set, trained on with LoRA, and re-measured.

Everything in this package works on records handed in (`FixitSample`, `Pair`);
the store's side lives in `ptxbench.db.fixit` and the command line glues the
two (`ptxbench fixit …`). Training (`train.py`) and re-measuring
(`remeasure.py`) import torch, transformers and peft only when called.
"""

from ptxbench.fixit.records import FixitSample, Pair, PAIR_KINDS

__all__ = ["FixitSample", "Pair", "PAIR_KINDS"]
