"""The closed failure vocabulary, shown everywhere: store, CLI, explorer, Fixit statistics.

A verdict is `OK` or exactly one of these words. When several apply, the
earliest stage wins (a kernel that does not assemble is never judged slow),
and within a stage the order below is the priority.
"""

from __future__ import annotations

from enum import StrEnum


class Category(StrEnum):
    """Every word a verdict can be. The values are what the store keeps (evaluations.category,
    measurements.category, labels), so they never change; a member compares equal to its string."""

    OK = "ok"
    # extract
    NO_CANDIDATE = "no_candidate"
    AMBIGUOUS_CANDIDATE = "ambiguous_candidate"
    BAD_MANIFEST = "bad_manifest"
    # assemble
    FORBIDDEN_DIRECTIVE = "forbidden_directive"
    BAD_HEADER = "bad_header"
    PTX_VERSION = "ptx_version"
    TARGET_MISMATCH = "target_mismatch"
    ARCH_UNSUPPORTED = "arch_unsupported"
    CUDA_COMPILE_ERROR = "cuda_compile_error"
    SYNTAX = "syntax"
    UNKNOWN_INSTRUCTION = "unknown_instruction"
    UNDEFINED_SYMBOL = "undefined_symbol"
    REDECLARATION = "redeclaration"
    OPERAND_MISMATCH = "operand_mismatch"
    INVALID_OPERAND = "invalid_operand"
    RESOURCE_LIMIT = "resource_limit"
    ASSEMBLE_OTHER = "assemble_other"
    # load
    LOAD_ERROR = "load_error"
    ENTRY_MISSING = "entry_missing"
    PARAM_MISMATCH = "param_mismatch"
    LAUNCH_CONFIG = "launch_config"
    # run
    HANG_TIMEOUT = "hang_timeout"
    ILLEGAL_INSTRUCTION = "illegal_instruction"
    MISALIGNED_ADDRESS = "misaligned_address"
    ILLEGAL_ADDRESS = "illegal_address"
    RUNTIME_OTHER = "runtime_other"
    # verify
    OUT_OF_BOUNDS_WRITE = "out_of_bounds_write"
    INPUT_MODIFIED = "input_modified"
    UNWRITTEN_OUTPUT = "unwritten_output"
    NAN_INF = "nan_inf"
    WRONG_RESULT = "wrong_result"
    # requirement
    REQUIRED_MISSING_PTX = "required_missing_ptx"
    REQUIRED_MISSING_SASS = "required_missing_sass"
    REQUIRED_NOT_EXECUTED = "required_not_executed"
    # integrity
    SUSPECTED_REWARD_HACK = "suspected_reward_hack"
    # speed
    SLOWER_THAN_BASELINE = "slower_than_baseline"
    NO_BASELINE = "no_baseline"
    # Not a verdict: the tool itself failed on the sample (the evaluation's status says how). Its row
    # keeps whatever the static stages found, so nothing attempted is left unrecorded.
    TOOL_ERROR = "tool_error"


C = Category
OK = Category.OK
TOOL_ERROR = Category.TOOL_ERROR

# Stage → categories in priority order (first = most fundamental).
BY_STAGE: dict[str, tuple[Category, ...]] = {
    "extract": (C.NO_CANDIDATE, C.AMBIGUOUS_CANDIDATE, C.BAD_MANIFEST),
    "assemble": (
        C.FORBIDDEN_DIRECTIVE,
        C.BAD_HEADER,
        C.PTX_VERSION,
        C.TARGET_MISMATCH,
        C.ARCH_UNSUPPORTED,
        C.CUDA_COMPILE_ERROR,
        C.SYNTAX,
        C.UNKNOWN_INSTRUCTION,
        C.UNDEFINED_SYMBOL,
        C.REDECLARATION,
        C.OPERAND_MISMATCH,
        C.INVALID_OPERAND,
        C.RESOURCE_LIMIT,
        C.ASSEMBLE_OTHER,
    ),
    "load": (C.LOAD_ERROR, C.ENTRY_MISSING, C.PARAM_MISMATCH, C.LAUNCH_CONFIG),
    "run": (C.HANG_TIMEOUT, C.ILLEGAL_INSTRUCTION, C.MISALIGNED_ADDRESS, C.ILLEGAL_ADDRESS, C.RUNTIME_OTHER),
    "verify": (C.OUT_OF_BOUNDS_WRITE, C.INPUT_MODIFIED, C.UNWRITTEN_OUTPUT, C.NAN_INF, C.WRONG_RESULT),
    "requirement": (C.REQUIRED_MISSING_PTX, C.REQUIRED_MISSING_SASS, C.REQUIRED_NOT_EXECUTED),
    "integrity": (C.SUSPECTED_REWARD_HACK,),
    "speed": (C.SLOWER_THAN_BASELINE, C.NO_BASELINE),
}

STAGES: tuple[str, ...] = tuple(BY_STAGE)
CATEGORIES: tuple[Category, ...] = tuple(c for cats in BY_STAGE.values() for c in cats)
STAGE_OF: dict[str, str] = {c: stage for stage, cats in BY_STAGE.items() for c in cats}

# A verdict that is not a judgement: the hardware was not there.
SKIPPED_PREFIX = "skipped: "
# The status of an evaluation the tool failed on (its category is TOOL_ERROR).
ERROR_PREFIX = "error: "

DESCRIPTIONS: dict[str, str] = {
    "no_candidate": "the response holds no kernel code",
    "ambiguous_candidate": "several code blocks and no way to tell which is the kernel",
    "bad_manifest": "the launch manifest does not parse or names things that do not exist",
    "forbidden_directive": "CUDA source asks the compiler for a file beyond CUDA's and the standard library's "
                           "headers (#include or __has_include of a path, #line with a file, #pragma GCC dependency)",
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
assert set(Category) == set(CATEGORIES) | {OK, TOOL_ERROR}


# Verdicts of a kernel that computes the right result with what was asked (the speed stage aside).
CORRECT: frozenset[str] = frozenset({OK, C.SLOWER_THAN_BASELINE, C.NO_BASELINE})


def is_category(word: str) -> bool:
    return word in (OK, TOOL_ERROR) or word in STAGE_OF or word.startswith(SKIPPED_PREFIX)


def worst(categories: list[str]) -> str:
    """The category to report when several apply: the earliest stage, then the highest priority."""
    present = [c for c in categories if c in STAGE_OF]
    if not present:
        return OK
    return min(present, key=CATEGORIES.index)
