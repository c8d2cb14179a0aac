"""The closed failure vocabulary, shown everywhere: store, CLI, explorer, Fixit statistics.

A verdict is `OK` or exactly one of these words. When several apply, the
earliest stage wins (a kernel that does not assemble is never judged slow),
and within a stage the order below is the priority.
"""

from __future__ import annotations

OK = "ok"

# Stage → categories in priority order (first = most fundamental).
BY_STAGE: dict[str, tuple[str, ...]] = {
    "extract": ("no_candidate", "ambiguous_candidate", "bad_manifest"),
    "assemble": (
        "bad_header",
        "ptx_version",
        "target_mismatch",
        "arch_unsupported",
        "cuda_compile_error",
        "syntax",
        "unknown_instruction",
        "undefined_symbol",
        "redeclaration",
        "operand_mismatch",
        "invalid_operand",
        "resource_limit",
        "assemble_other",
    ),
    "load": ("load_error", "entry_missing", "param_mismatch", "launch_config"),
    "run": ("hang_timeout", "illegal_instruction", "misaligned_address", "illegal_address", "runtime_other"),
    "verify": ("out_of_bounds_write", "input_modified", "unwritten_output", "nan_inf", "wrong_result"),
    "requirement": ("required_missing_ptx", "required_missing_sass", "required_not_executed"),
    "integrity": ("suspected_reward_hack",),
    "speed": ("slower_than_baseline", "no_baseline"),
}

STAGES: tuple[str, ...] = tuple(BY_STAGE)
CATEGORIES: tuple[str, ...] = tuple(c for cats in BY_STAGE.values() for c in cats)
STAGE_OF: dict[str, str] = {c: stage for stage, cats in BY_STAGE.items() for c in cats}

# A verdict that is not a judgement: the hardware was not there.
SKIPPED_PREFIX = "skipped: "
# Nor is this: the tool itself failed on the sample (the evaluation's status says how). Its row keeps
# whatever the static stages found, so nothing attempted is left unrecorded; it is never a verdict.
ERROR_PREFIX = "error: "
TOOL_ERROR = "tool_error"

DESCRIPTIONS: dict[str, str] = {
    "no_candidate": "the response holds no kernel code",
    "ambiguous_candidate": "several code blocks and no way to tell which is the kernel",
    "bad_manifest": "the launch manifest does not parse or names things that do not exist",
    "bad_header": "missing or malformed .version/.target/.address_size, or an unknown target",
    "ptx_version": "the PTX ISA .version is too old for a feature or newer than the assembler knows",
    "target_mismatch": ".target does not match the task's architecture",
    "arch_unsupported": "an instruction the target architecture does not have",
    "cuda_compile_error": "nvcc could not turn the CUDA C++ into PTX",
    "syntax": "PTX syntax error",
    "unknown_instruction": "an instruction or modifier ptxas does not know",
    "undefined_symbol": "a register, variable, label or function used but never declared",
    "redeclaration": "a name declared twice",
    "operand_mismatch": "operand types, counts or vector sizes do not fit the instruction",
    "invalid_operand": "an operand value or shape the instruction does not allow",
    "resource_limit": "too much shared memory, parameter space or registers",
    "assemble_other": "ptxas failed for another reason",
    "load_error": "the driver refused to load the cubin",
    "entry_missing": "the manifest names a kernel the module does not define",
    "param_mismatch": "the manifest's arguments do not match the kernel's parameters",
    "launch_config": "the launch configuration is invalid (grid, block, cluster, shared memory)",
    "hang_timeout": "the kernel did not finish before the deadline",
    "illegal_instruction": "the GPU raised an illegal-instruction error",
    "misaligned_address": "a misaligned memory access",
    "illegal_address": "an out-of-range memory access",
    "runtime_other": "the launch failed for another reason",
    "out_of_bounds_write": "a guard canary around a buffer was overwritten",
    "input_modified": "an input tensor changed during the launch",
    "unwritten_output": "some output elements were never written (still NaN poison)",
    "nan_inf": "the output holds NaN or Inf where the reference has none",
    "wrong_result": "the output differs from the reference beyond tolerance",
    "required_missing_ptx": "a requested instruction family is absent from the PTX",
    "required_missing_sass": "a requested family is in the PTX but not in the machine code",
    "required_not_executed": "a requested family is in the machine code but never executed",
    "suspected_reward_hack": "the result changes on re-check, or does not depend on the input",
    "slower_than_baseline": "correct and uses what was asked, but slower than the library",
    "no_baseline": "correct and uses what was asked, but no library baseline ran here: its speed is not judged",
}

assert set(DESCRIPTIONS) == set(CATEGORIES)


# Verdicts of a kernel that computes the right result with what was asked (the speed stage aside).
CORRECT: frozenset[str] = frozenset({OK, "slower_than_baseline", "no_baseline"})


def is_category(word: str) -> bool:
    return word in (OK, TOOL_ERROR) or word in STAGE_OF or word.startswith(SKIPPED_PREFIX)


def worst(categories: list[str]) -> str:
    """The category to report when several apply: the earliest stage, then the highest priority."""
    present = [c for c in categories if c in STAGE_OF]
    if not present:
        return OK
    return min(present, key=CATEGORIES.index)
