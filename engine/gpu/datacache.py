"""Inputs per (task, sizes, seed), kept on the GPU across candidates; references made only after a run.

A batch of candidates for one task judges them on the same seeds, so each set's inputs (attention
backward's include a forward pass) are drawn once per worker, not once per candidate. Entries are
evicted least-recently-used when the cache passes its byte budget, never one the running job has used:
a set that does not fit then goes uncached, so a job larger than the cache still hits on all but its
last sets.

No reference is kept. A candidate's kernel runs in the harness's CUDA context and can read any mapped
device address, so a reference kept for the next candidate would be its answer, lying in memory a scan
from its buffers can reach. A set's reference is computed when its trial is verified, after the run,
and released at the end of the size (`release`); what the allocators keep of it is zeroed before the
next candidate's first launch there (engine/gpu/at_rest.py).

An entry lives in device memory a candidate's kernel can write, and a job fingerprints only the sizes it
judges: a write into another size's entry, or into an entry a later candidate will use, would otherwise
stand as that candidate's inputs. So every entry is sealed with its fingerprint (in host memory) when it
is drawn and checked against it whenever it is handed out; one that changed is drawn again (and counted
in `corrupted`).

Runs inside the worker process only (imports torch).
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

import torch

from ptxbench.engine.gpu import fused
from ptxbench.engine.gpu.buffers import TORCH_DTYPES, bits_view
from ptxbench.tasks.inputs import make_inputs
from ptxbench.tasks.reference import reference
from ptxbench.tasks.spec import TaskSpec

Key = tuple[str, tuple[tuple[str, int], ...], int]


@dataclass
class TaskData:
    inputs: dict[str, torch.Tensor]         # pristine, in the spec's dtypes, contiguous
    reference: Mapping[str, torch.Tensor]   # higher precision (a lazy one: computed when first read)
    seal: torch.Tensor | None = None        # the inputs' fingerprint when drawn (cached entries: in host memory)
    draw_s: float = 0.0                     # what drawing it took (cached entries)
    seal_slot: int | None = None            # a fresh set: where its seal was copied to host memory

    @property
    def nbytes(self) -> int:
        kept = self.reference.kept() if isinstance(self.reference, LazyReference) else self.reference.values()
        return sum(t.numel() * t.element_size() for t in (*self.inputs.values(), *kept))

    def reference_at(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The reference at these positions along S only, computed now and not kept."""
        if isinstance(self.reference, LazyReference):
            return self.reference.at_rows(rows)
        index = rows.to(next(iter(self.inputs.values())).device)
        return {name: t.index_select(2, index) for name, t in self.reference.items()}

    def release(self) -> None:
        """Forget the reference, if it was computed (the next read computes it again)."""
        if isinstance(self.reference, LazyReference):
            self.reference.release()


def draw(task: TaskSpec, sizes: dict[str, int], seed: int, device: torch.device, *, lazy: bool = False) -> TaskData:
    """Inputs of one seed and their reference, uncached; `lazy`: the reference computed when first read."""
    raw = make_inputs(task, sizes, seed, device)
    inputs = {t.name: raw[t.name].to(TORCH_DTYPES[t.dtype]).contiguous() for t in task.inputs}
    ref = LazyReference(task, inputs)   # from the very tensors a seal covers (a lazy one: after the run)
    return TaskData(inputs, ref if lazy else ref.computed())


EDGE_ROWS = 128         # a held-out sample always holds the first and last rows: where tiles end


def row_sample(length: int, count: int) -> torch.Tensor | None:
    """`count` positions of `length` (sorted, on the CPU), drawn from the OS after the run they check: the
    first and last EDGE_ROWS, and the rest at random; None when that would be every row."""
    if count <= 0 or count >= length:
        return None
    edges = torch.cat([torch.arange(min(EDGE_ROWS, length)), torch.arange(max(0, length - EDGE_ROWS), length)])
    middle = torch.arange(EDGE_ROWS, max(EDGE_ROWS, length - EDGE_ROWS))
    want = max(0, count - edges.unique().numel())
    gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 2)
    picked = middle[torch.randperm(middle.numel(), generator=gen)[:want]]
    return torch.cat([edges, picked]).unique()


class LazyReference(Mapping[str, torch.Tensor]):
    """A set's reference, computed (on the current stream) the first time an output is read: it does not
    exist while the candidate's run that it checks is under way."""

    def __init__(self, task: TaskSpec, raw: dict[str, torch.Tensor]) -> None:
        self.task, self.raw = task, raw
        self._outputs: dict[str, torch.Tensor] | None = None

    def computed(self) -> dict[str, torch.Tensor]:
        if self._outputs is None:
            outputs = reference(self.task, self.raw)
            self._outputs = {t.name: outputs[t.name].contiguous() for t in self.task.outputs}
        return self._outputs

    def at_rows(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The outputs at these positions along S only (tasks.reference.ROW_SAMPLED); not kept."""
        outputs = reference(self.task, self.raw, rows=rows)
        return {t.name: outputs[t.name].contiguous() for t in self.task.outputs}

    def kept(self) -> list[torch.Tensor]:
        return list(self._outputs.values()) if self._outputs is not None else []

    def release(self) -> None:
        self._outputs = None

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.computed()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(t.name for t in self.task.outputs)

    def __len__(self) -> int:
        return len(self.task.outputs)


class DataCache:
    def __init__(self, device: torch.device, budget_bytes: int) -> None:
        self.device = device
        self.budget = budget_bytes
        self._entries: OrderedDict[Key, TaskData] = OrderedDict()
        self._job_of: dict[Key, int] = {}      # the job that last used each entry
        self.job = 0
        self.hits = 0
        self.misses = 0
        self.corrupted = 0                  # entries found changed since they were drawn, and drawn again

    @staticmethod
    def key(task: TaskSpec, sizes: dict[str, int], seed: int) -> Key:
        return task.id, tuple(sorted(sizes.items())), int(seed)

    def begin_job(self) -> None:
        """Entries the coming job uses are kept through it: a job's sets in order, over a cache too small for
        them all, would otherwise evict each entry just before its next use (every lookup a miss)."""
        self.job += 1

    def get(self, task: TaskSpec, sizes: dict[str, int], seed: int) -> TaskData:
        key = self.key(task, sizes, seed)
        self._job_of[key] = self.job
        if key in self._entries:
            self._entries.move_to_end(key)
            entry = self._entries[key]
            if entry.seal is not None and torch.equal(fingerprint(entry).cpu(), entry.seal):
                self.hits += 1
                return entry
            self.corrupted += 1
            del self._entries[key]
        self.misses += 1
        started = time.perf_counter()
        data = draw(task, sizes, seed, self.device, lazy=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        data.draw_s = time.perf_counter() - started
        data.seal = fingerprint(data).cpu()      # where no kernel can write it
        self._entries[key] = data
        self._evict(key)
        return data

    def drop(self, task: TaskSpec, sizes: dict[str, int], seed: int) -> None:
        """Forget an entry (a candidate wrote into it): the next use computes it again."""
        self._entries.pop(self.key(task, sizes, seed), None)

    def _evict(self, new: Key) -> None:
        """Least recently used first, among entries no part of this job has used; if that is not room enough,
        the new entry is not kept (the caller still has it)."""
        total = sum(e.nbytes for e in self._entries.values())
        for key in [k for k in self._entries if self._job_of.get(k, -1) < self.job]:
            if total <= self.budget:
                return
            total -= self._entries.pop(key).nbytes
        if total > self.budget and len(self._entries) > 1:
            self._entries.pop(new)

    def clear(self) -> None:
        self._entries.clear()
        self._job_of.clear()


FINGERPRINT_CHUNK = 1 << 24
FRESH_POOL = 1 << 20                # seeds a round may draw from, where each round brings new inputs


# The fingerprint is keyed by a secret of the process: a kernel that changed a copy cannot compute the
# fingerprint its change should have, nor find a seal kept in device memory by its value.
FINGERPRINT_KEY = int.from_bytes(os.urandom(8), "little")
_PHI = 0x9E3779B97F4A7C15
_FMIX = (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53)


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _shifted(x: torch.Tensor) -> torch.Tensor:
    return x ^ ((x >> 33) & ((1 << 31) - 1))        # a logical shift of the 64 bits


def fingerprint(data: TaskData) -> torch.Tensor:
    """Σ fmix64(bits[i] ^ i·φ ^ key) over each of the harness's input copies, mod 2⁶⁴ (MurmurHash3's
    finalizer: a permutation or any change of bits shows, and without the key no one can say how): a
    candidate that writes into them is seen. References are left out: one is made only after the run it
    checks, so no candidate launch can reach it, and reading it here would compute a lazy one early."""
    parts = []
    for t in data.inputs.values():
        bits = bits_view(t)
        if fused.ENABLED and fused.usable(bits):
            parts.append(fused.fingerprint(bits, FINGERPRINT_KEY))
            continue
        total = torch.zeros((), dtype=torch.int64, device=t.device)
        for start in range(0, bits.numel(), FINGERPRINT_CHUNK):
            x = bits[start:start + FINGERPRINT_CHUNK].to(torch.int64)
            x = x ^ (torch.arange(start, start + x.numel(), device=t.device, dtype=torch.int64) * _signed(_PHI))
            x = _shifted(x ^ _signed(FINGERPRINT_KEY))
            x = _shifted(x * _signed(_FMIX[0]))
            x = _shifted(x * _signed(_FMIX[1]))
            total += x.sum()
        parts.append(total)
    return torch.stack(parts)


class FreshSets(Sequence[TaskData]):
    """A million input sets that exist only while a round uses them: each drawn from its own seed, on the
    current stream, when the round resets; its reference is computed only if the round is checked, after
    the candidate's run.

    Every timed round of every task brings inputs no earlier launch has seen, so no result a kernel
    keeps (in local memory, in memory past its buffers, anywhere the harness cannot reset) can be
    served for a later round: a memo never hits, however it is paced. Every set's inputs are
    fingerprinted when drawn, checked round or not (the work before a run must not say which it
    is); a checked round's are fingerprinted again after its run, and its reference is computed
    then, from those inputs: a candidate that writes into the harness's copy is seen (`tampered`),
    and one cannot write into a reference that does not exist while it runs."""

    def __init__(self, task: TaskSpec, sizes: dict[str, int], device: torch.device) -> None:
        self.task, self.sizes, self.device = task, sizes, device
        self.base = int.from_bytes(os.urandom(8), "little") >> 2
        self._last: tuple[int, TaskData] | None = None      # a round's reset and its check ask for the same set
        self._seals = _HostSeals(len(task.inputs), device)
        self._sealed: list[tuple[int, int, int]] = []      # checked rounds: set, seal slot before, after

    def confirm(self, k: int) -> None:
        """After a checked round's run: the inputs' fingerprint again, beside the one taken when drawn. The
        set must be the one the round reset from: drawing it again here would seal new, untouched inputs."""
        assert self._last is not None and self._last[0] == k, "confirm follows its own round's reset"
        data = self._last[1]
        assert data.seal_slot is not None
        self._sealed.append((k, data.seal_slot, self._seals.keep(fingerprint(data))))

    def tampered(self) -> list[int]:
        """Checked sets whose inputs changed while the candidate ran (waits for the stream). A list of rounds,
        not a map by set: a set drawn again for a later checked round does not hide an earlier write."""
        self._seals.wait()
        return sorted({k for k, before, after in self._sealed if not self._seals.same(before, after)})

    def __len__(self) -> int:
        return FRESH_POOL

    @overload
    def __getitem__(self, k: int) -> TaskData: ...
    @overload
    def __getitem__(self, k: slice) -> Sequence[TaskData]: ...

    def __getitem__(self, k: int | slice) -> TaskData | Sequence[TaskData]:
        if isinstance(k, slice):
            raise TypeError("a pool of fresh sets is not sliced")
        if self._last is None or self._last[0] != k:
            seed = (self.base + 7919 * k) % (1 << 62)
            data = draw(self.task, self.sizes, seed, self.device, lazy=True)
            data.seal_slot = self._seals.keep(fingerprint(data))     # enqueued: every round alike
            self._last = (k, data)
        return self._last[1]


class _HostSeals:
    """Fingerprints copied to pinned host memory as they are taken, in stream order (no wait): a seal left in
    device memory could be rewritten by a kernel that finds it. Slots grow by pinned blocks."""

    BLOCK = 1024

    def __init__(self, width: int, device: torch.device) -> None:
        self.width, self.device = width, device
        self.blocks: list[torch.Tensor] = []
        self.used = 0

    def keep(self, fp: torch.Tensor) -> int:
        if self.used == len(self.blocks) * self.BLOCK:
            pinned = self.device.type == "cuda"
            self.blocks.append(torch.zeros((self.BLOCK, self.width), dtype=torch.int64, pin_memory=pinned))
        slot = self.used
        self.used += 1
        self.row(slot).copy_(fp, non_blocking=True)
        return slot

    def wait(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def row(self, slot: int) -> torch.Tensor:
        return self.blocks[slot // self.BLOCK][slot % self.BLOCK]

    def same(self, a: int, b: int) -> bool:
        """After `wait`."""
        return torch.equal(self.row(a), self.row(b))
