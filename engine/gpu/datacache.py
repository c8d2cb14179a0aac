"""Inputs and reference outputs per (task, sizes, seed), kept on the GPU across candidates.

A batch of candidates for one task judges them on the same seeds, so the
reference (a float64 GEMM, a chunked attention) is computed once per worker,
not once per candidate. Entries are evicted least-recently-used when the
cache passes its byte budget.

Runs inside the worker process only (imports torch).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from ptxbench.engine.gpu.buffers import TORCH_DTYPES
from ptxbench.tasks.inputs import make_inputs
from ptxbench.tasks.reference import reference
from ptxbench.tasks.spec import TaskSpec

Key = tuple[str, tuple[tuple[str, int], ...], int]


@dataclass
class TaskData:
    inputs: dict[str, torch.Tensor]         # pristine, in the spec's dtypes, contiguous
    reference: dict[str, torch.Tensor]      # higher precision

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.inputs.values(), *self.reference.values()))


def draw(task: TaskSpec, sizes: dict[str, int], seed: int, device: torch.device) -> TaskData:
    """Inputs of one seed and their reference, uncached."""
    raw = make_inputs(task, sizes, seed, device)
    inputs = {t.name: raw[t.name].to(TORCH_DTYPES[t.dtype]).contiguous() for t in task.inputs}
    outputs = reference(task, raw)
    return TaskData(inputs, {t.name: outputs[t.name].contiguous() for t in task.outputs})


class DataCache:
    def __init__(self, device: torch.device, budget_bytes: int) -> None:
        self.device = device
        self.budget = budget_bytes
        self._entries: OrderedDict[Key, TaskData] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(task: TaskSpec, sizes: dict[str, int], seed: int) -> Key:
        return task.id, tuple(sorted(sizes.items())), int(seed)

    def get(self, task: TaskSpec, sizes: dict[str, int], seed: int) -> TaskData:
        key = self.key(task, sizes, seed)
        if key in self._entries:
            self._entries.move_to_end(key)
            self.hits += 1
            return self._entries[key]
        self.misses += 1
        data = draw(task, sizes, seed, self.device)
        self._entries[key] = data
        self._evict()
        return data

    def drop(self, task: TaskSpec, sizes: dict[str, int], seed: int) -> None:
        """Forget an entry (a candidate wrote into it): the next use computes it again."""
        self._entries.pop(self.key(task, sizes, seed), None)

    def _evict(self) -> None:
        total = sum(e.nbytes for e in self._entries.values())
        while total > self.budget and len(self._entries) > 1:
            _, old = self._entries.popitem(last=False)
            total -= old.nbytes

    def clear(self) -> None:
        self._entries.clear()
