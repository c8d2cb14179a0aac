"""Prompts: a system and a user message per task and architecture-context level.

Levels (stored with every run, because they change results):
- `none`:  the task, the interface, the candidate format, what is judged;
- `brief`: the same, plus the instruction families the kernel must use;
- `full`:  the same as brief, plus the reference notes in tasks/prompts/*.md
  (operand layouts, descriptors, fences and barriers, tensor maps, the PTX
  header the assembler accepts) for the task's families and arch.

Only train sizes are ever shown; held-out sizes stay unseen. Bump
PROMPT_VERSION whenever the text a model sees changes (tests/test_prompts.py
holds the digest of every version's text and fails until it is bumped).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ptxbench.tasks.spec import TaskSpec

PROMPT_VERSION = "ptxbench-prompts/2"
CONTEXT_LEVELS: tuple[str, ...] = ("none", "brief", "full")
NOTES_DIR = Path(__file__).resolve().parent / "prompts"

GPU_NAMES = {"sm_90a": "Hopper (H100/H200)", "sm_100a": "Blackwell (B200)"}
BASELINE_NAMES = {
    "cublas": "cuBLAS (torch.matmul)",
    "cudnn_sdpa": "cuDNN attention through torch's scaled_dot_product_attention",
    "cudnn_sdpa_backward": "the backward of torch's scaled_dot_product_attention with the cuDNN backend",
    "torch_rms_norm": "torch.nn.functional.rms_norm",
    "torch_layer_norm": "torch.nn.functional.layer_norm",
    "torch_softmax": "torch.softmax",
    "torch_add": "torch.add",
}
DISTRIBUTIONS = {
    "normal": "independent N(0, 1) values",
    "spiky": "N(0, 1) values, each replaced with probability 0.001 by a draw from N(0, 100) (std 10)",
    "uniform": "independent uniform values",
}
# What a model is told to use at `brief` and `full`: the PTX each family means.
FAMILY_HINTS: dict[str, str] = {
    "wgmma": "wgmma: warpgroup MMA `wgmma.mma_async` (with wgmma.fence / commit_group / wait_group)",
    "tma": "tma: tensor-map copies `cp.async.bulk.tensor` (tensor maps declared in the manifest)",
    "bulk_copy": "bulk_copy: non-tensor bulk copies `cp.async.bulk` (completion on an mbarrier)",
    "mbarrier": "mbarrier: shared-memory barriers `mbarrier.init / arrive.expect_tx / try_wait`",
    "setmaxnreg": "setmaxnreg: `setmaxnreg.inc / .dec` to move registers between warpgroups",
    "stmatrix": "stmatrix: `stmatrix.sync.aligned` stores of MMA fragments to shared memory",
    "ldmatrix": "ldmatrix: `ldmatrix.sync.aligned` loads of MMA fragments from shared memory",
    "cluster": "cluster: thread-block clusters (`barrier.cluster`, distributed shared memory)",
    "tcgen05_mma": "tcgen05_mma: `tcgen05.mma` with the accumulator in tensor memory",
    "tcgen05_alloc": "tcgen05_alloc: tensor-memory allocation `tcgen05.alloc / dealloc`",
    "tcgen05_ld": "tcgen05_ld: tensor memory → registers `tcgen05.ld`",
    "tcgen05_st": "tcgen05_st: registers → tensor memory `tcgen05.st`",
    "tcgen05_commit": "tcgen05_commit: `tcgen05.commit` arriving on an mbarrier",
    "tcgen05_cp": "tcgen05_cp: shared memory → tensor memory `tcgen05.cp`",
}
# Which note files a family brings into the `full` prompt (header.md and sync.md always come).
FAMILY_NOTES: dict[str, tuple[str, ...]] = {
    "wgmma": ("wgmma.md", "setmaxnreg.md"),
    "tma": ("tma.md", "mbarrier.md"),
    "bulk_copy": ("bulk_copy.md", "mbarrier.md"),
    "mbarrier": ("mbarrier.md",),
    "setmaxnreg": ("setmaxnreg.md",),
    "tcgen05_mma": ("tcgen05.md",),
    "tcgen05_alloc": ("tcgen05.md",),
    "tcgen05_ld": ("tcgen05.md",),
    "tcgen05_st": ("tcgen05.md",),
    "tcgen05_commit": ("tcgen05.md",),
    "tcgen05_cp": ("tcgen05.md",),
}
NOTE_ORDER = ("header.md", "sync.md", "mbarrier.md", "tma.md", "bulk_copy.md", "wgmma.md", "setmaxnreg.md",
              "tcgen05.md")


@dataclass(frozen=True)
class Prompt:
    task_id: str
    context: str
    version: str
    system: str
    user: str

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for part in (self.system, self.user):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()


@cache
def note(name: str) -> str:
    return (NOTES_DIR / name).read_text(encoding="utf-8").strip()


def notes_for(task: TaskSpec) -> list[str]:
    """The note files the `full` level adds for this task, in reading order."""
    wanted = {"header.md", "sync.md"}
    for family in task.families:
        wanted.update(FAMILY_NOTES.get(family, ()))
    if task.arch == "sm_100a":
        wanted.discard("setmaxnreg.md")  # the Blackwell notes cover their own register story
    return [n for n in NOTE_ORDER if n in wanted]


def _fmt_sizes(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _tensor_lines(task: TaskSpec) -> list[str]:
    lines = []
    for t in task.inputs:
        extra = " (derived from the forward reference, not random)" if t.derived else ""
        lines.append(f"- input  `{t.name}`: [{', '.join(t.shape)}] {t.dtype}{extra}")
    for t in task.outputs:
        lines.append(f"- output `{t.name}`: [{', '.join(t.shape)}] {t.dtype}")
    return lines


def _tolerance_text(task: TaskSpec) -> str:
    tol = task.tolerance
    metric = ("relative L2 error ‖out − ref‖₂ / ‖ref‖₂" if tol.metric == "rel_l2" else "largest absolute error")
    text = f"{metric} at most {tol.max:g} for every output"
    if tol.per_output:
        text += " (" + ", ".join(f"{k}: at most {v:g}" for k, v in tol.per_output.items()) + ")"
    return text


def system_message(task: TaskSpec) -> str:
    gpu = GPU_NAMES.get(task.arch, task.arch)
    return (
        f"You are an expert GPU kernel engineer. You write device code for NVIDIA {gpu} GPUs, target "
        f"`{task.arch}`, in PTX or in CUDA C++ with inline PTX.\n\n"
        "The harness owns the host side: it allocates every tensor, encodes TMA tensor maps, launches your "
        "kernels, checks the outputs against a reference and times them against the best library. You answer "
        "with device code only, plus an optional JSON launch manifest; you cannot call a library or see the "
        "reference.\n\n"
        "Answer with exactly one fenced code block holding the whole kernel (```ptx for a PTX module, ```cuda "
        "for CUDA C++), and, if the default launch does not fit your kernel, one ```json block with the launch "
        "manifest. Other code blocks (host code, fragments, alternatives) make the answer ambiguous."
    )


_FORMAT = """## What to answer

The candidate is one of:
- a whole PTX module: `.version` (ptxas 13.5 accepts up to 9.5; {arch} needs at least {min_version}), `.target {arch}`, `.address_size 64`, one or more `.visible .entry` kernels; or
- CUDA C++ device code with inline PTX (`asm volatile`): kernels declared `extern "C" __global__` so their names are stable; the harness runs `nvcc -gencode=arch=compute_{cc},code={arch} -ptx -std=c++20 --expt-relaxed-constexpr` on it and judges the PTX that comes out; a manifest `build` object adds `-D` defines (`defines`: a list of NAME or NAME=VALUE) and device-code flags (`flags`, from: `-std=c++17`, `--use_fast_math`, `-lineinfo`, `--ftz=`, `--prec-div=`, `--prec-sqrt=`, `--fmad=` true or false, `--extended-lambda`, `--restrict`). Only CUDA's own headers are available.

The launch manifest (a ```json block whose object has a `launches` key) says how to launch what you wrote. Every field is optional except `launches[*].entry`; the defaults below fill the rest. A `launches` list you give replaces the default list as a whole; `tensor_maps` and `scratch` are added to the defaults.
- `launches`: run in order on one stream: `entry`, `grid`, `block`, `cluster` (1–3 values each; `[1,1,1]` = no cluster), `shared_bytes` (dynamic shared memory; above 48 KiB the harness raises the limit), `args`.
- `args`, in the kernel's parameter order: a tensor or scratch name (its device address, `.param .u64`), `"tmap:NAME"` (a 128-byte tensor map by value, `.param .align 64 .b8 NAME[128]`), `"i32:EXPR"`, `"u32:EXPR"`, `"i64:EXPR"`, `"u64:EXPR"`, `"f32:EXPR"` (scalars).
- Expressions: integers, floats, the size names ({size_names}), `num_sms`, `+ - * / // % **`, parentheses, `ceil_div(a, b)`, `min`, `max`, `sqrt`, `log2`.
- `tensor_maps`: `{{"NAME": {{"tensor": "A", "box": [128, 64], "swizzle": "128B"}}}}`, with optional `view` (reshape of the contiguous tensor), `l2_promotion`, `oob_fill` (`zero`/`nan`), `element_strides`. Shapes and boxes are written outermost-first, as PyTorch lists shapes.
- `scratch`: extra device buffers, `{{"NAME": {{"dtype": "f32", "shape": ["M", "N"], "init": "zero"}}}}` (`init`: `zero` or `poison`).

Default launch manifest for this task:
```json
{default_manifest}
```"""


def manifest_json(manifest: dict) -> str:
    """A manifest as a model would write it: one line per launch, tensor map and scratch buffer."""
    lines = ["{"]
    keys = list(manifest)
    for i, key in enumerate(keys):
        value = manifest[key]
        comma = "," if i < len(keys) - 1 else ""
        if isinstance(value, list):
            inner = [f"    {json.dumps(v)}" for v in value]
            lines.append(f'  {json.dumps(key)}: [\n' + ",\n".join(inner) + f"\n  ]{comma}")
        elif isinstance(value, dict):
            inner = [f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items()]
            lines.append(f'  {json.dumps(key)}: {{\n' + ",\n".join(inner) + f"\n  }}{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines)


def _min_version(arch: str) -> str:
    return {"sm_90a": "8.0", "sm_100a": "8.6"}.get(arch, "8.0")


def user_message(task: TaskSpec, context: str) -> str:
    if context not in CONTEXT_LEVELS:
        raise ValueError(f"unknown context level {context!r} (choose from {', '.join(CONTEXT_LEVELS)})")
    parts: list[str] = [f"# Task `{task.id}`: {task.title}", task.description.strip()]

    interface = ["## Interface", "Every tensor is contiguous and row-major in the order its shape is written:"]
    interface += _tensor_lines(task)
    if task.params:
        interface.append("Constants: " + ", ".join(f"{k} = {v:g}" for k, v in task.params.items()) + ".")
    if task.constraints:
        interface.append("Every tested size satisfies: " + "; ".join(f"`{c}`" for c in task.constraints) + ".")
    parts.append("\n".join(interface))

    sizes = ["## Sizes and judging",
             "The kernel is checked at these sizes: " + "; ".join(f"{{{_fmt_sizes(s)}}}" for s in task.train) + "."]
    if task.headline in task.train:
        sizes.append(f"It is timed at {{{_fmt_sizes(task.headline)}}}.")
    dist = DISTRIBUTIONS.get(task.input_distribution, task.input_distribution)
    sizes += [
        f"Inputs: {dist}, fresh for each of at least three trials with different seeds.",
        f"Tolerance: {_tolerance_text(task)}, against a reference computed in higher precision.",
        "Outputs are filled with NaN before every launch and every buffer has guard words before and after "
        "it: write every output element, nothing outside the outputs and scratch buffers, and never modify "
        "an input.",
    ]
    baseline = BASELINE_NAMES.get(task.baseline, task.baseline)
    if context == "none" or not task.families:
        sizes.append("The kernel is judged, in order, on: assembling for "
                     f"`{task.arch}`; computing the right result; the instruction families it uses (checked in the "
                     f"PTX and in the machine code); and its speed against {baseline}, timed the same way.")
    else:
        sizes.append(f"The kernel is judged, in order, on: assembling for `{task.arch}`; computing the right "
                     "result; using every requested instruction family (each must appear in the PTX and, where the "
                     "family has its own machine instruction, in the SASS: code on a path that never runs does not "
                     f"count); and its speed against {baseline}, timed the same way.")
    parts.append("\n".join(sizes))

    if context in ("brief", "full") and task.families:
        fams = ["## Instruction families to use",
                "The kernel must use every one of these:"]
        fams += [f"- {FAMILY_HINTS.get(f, f)}" for f in task.families]
        parts.append("\n".join(fams))

    cc = task.arch.removeprefix("sm_")
    parts.append(_FORMAT.format(
        arch=task.arch, min_version=_min_version(task.arch), cc=cc,
        size_names=", ".join(f"`{n}`" for n in task.size_names()),
        default_manifest=manifest_json(task.launch),
    ))

    if context == "full":
        notes = ["## Reference notes", "Facts about the instructions involved, checked against ptxas 13.0:"]
        notes += [note(n) for n in notes_for(task)]
        parts.append("\n\n".join(notes))

    parts.append("Reply with the complete kernel in one fenced code block, and the launch manifest in a ```json "
                 "block if you do not use the default launch.")
    return "\n\n".join(parts) + "\n"


def build_prompt(task: TaskSpec, context: str) -> Prompt:
    return Prompt(task.id, context, PROMPT_VERSION, system_message(task), user_message(task, context))


def prompt_digest(tasks: list[TaskSpec] | None = None) -> str:
    """One hash over every task's prompt at every level: what PROMPT_VERSION promises to pin."""
    from ptxbench.tasks.spec import all_tasks

    h = hashlib.sha256()
    for task in tasks if tasks is not None else all_tasks():
        for level in CONTEXT_LEVELS:
            h.update(build_prompt(task, level).digest.encode())
    return h.hexdigest()
