"""Reading untrusted text is linear: every scanning function of the engine, on adversarial inputs.

Each function is run on each generator's text at 128 KiB (the better of two) and at 1 MiB, and
must grow near-linearly (under 16× for the 8× step; quadratic growth would be 64×); the 1 MiB
run must take under 2 s. Both sizes are past the 128 KiB where some patterns' working memory
leaves the CPU's cache (3× the time per byte, measured on the `.a` chain, a linear cost that a
32 KiB → 256 KiB step would read as growth). The generators are the shapes that made the old backtracking
patterns quadratic or worse: unclosed `<think>`, `/*` and `#/*`, chains of `#define`s, many
`__global__`, fences, unclosed `(` after `.entry`, `@%p` floods, `.a` chains, long whitespace.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable

import pytest

from ptxbench.engine import text_scan
from ptxbench.engine.cuda_source import cuda_kernels, defined_names, is_host_code
from ptxbench.engine.extract import MAX_EVIDENCE_BYTES, MAX_LISTED, extract
from ptxbench.engine.inspect import inspect, statement_parts
from ptxbench.engine.launch_check import _thread_bounds, demangled_base
from ptxbench.engine.ptx_params import parse_entry_params
from ptxbench.models.refine import assistant_text

SMALL, BIG = 128 << 10, 1 << 20
MAX_RATIO = 16.0            # for the 8× step: linear is 8, n·log n about 9.6, quadratic 64
MAX_BIG_S = 2.0
KERNEL = 'extern "C" __global__ void k(float* x) { x[0] = 1.0f; }\n'


def _repeat(unit: str, head: str = "", tail: str = "") -> Callable[[int], str]:
    def make(size: int) -> str:
        body = size - len(head) - len(tail)
        return head + (unit * (body // len(unit) + 1))[:max(body, 0)] + tail
    return make


def _define_chain(size: int) -> str:
    lines = ["#define A0 __global__\n"]
    total, i = len(lines[0]), 0
    while total < size:
        line = f"#define A{i + 1} A{i}\n"
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines) + f"A{i} void k(float* x) {{}}\n"


def _function_macros(size: int) -> str:
    lines, total, i = [], 0, 0
    while total < size:
        line = f"#define F{i}(n) __global__ void n\nF{i}(k{i})"
        lines.append(line)
        total += len(line)
        i += 1
    return "\n".join(lines)


def _mixed(size: int) -> str:
    rng = random.Random(7)
    pieces = ["<think>", "/*", "#/*", "#define A ", "__global__ ", "```\n", "```", ".entry x(", "((", "@%p ",
              ".a", "   ", "\n\n", "f(", '"\\"', "struct S : ", "a:", "{", "}", ";", "__launch_bounds__(",
              ".func (", ".visible\n", "`", "int main(", "//", "*/", "</think>", "enum class "]
    out: list[str] = []
    total = 0
    while total < size:
        p = rng.choice(pieces)
        out.append(p)
        total += len(p)
    return "".join(out)[:size]


GENERATORS: dict[str, Callable[[int], str]] = {
    "unclosed <think>": _repeat("<think>"),
    "unclosed /*": _repeat("/* "),          # "/*" alone repeated closes itself: /*/*/ holds a */
    "#/*": _repeat("#/*"),
    "// lines": _repeat("//x\n"),
    "define chain": _define_chain,
    "function-like macros": _function_macros,
    "#define X(": _repeat("#define X(\n"),
    "many __global__": _repeat("__global__ "),
    "__global__ void k(": _repeat("__global__ void k(\n"),
    "__launch_bounds__(": _repeat("__global__ __launch_bounds__("),
    "many fences": _repeat("```cuda\n" + KERNEL),
    "empty fences": _repeat("```\n```\n", tail="```cuda\n" + KERNEL + "```\n"),
    "one long fence line": _repeat(" ", head="```", tail="`"),
    ".entry x(": _repeat(".entry x("),
    ".func (": _repeat(".func ("),
    "((((": _repeat("("),
    "f(f(f(": _repeat("f("),
    "struct S :": _repeat("struct S : "),
    "@%p flood": _repeat("@%p "),
    "@ then spaces": _repeat(" ", head="@", tail="x;"),
    "labels": _repeat("a:"),
    ".a chain": _repeat(".a", head="ld"),
    "x {} braces": _repeat("{}", head="add "),
    "escaped quotes": _repeat('"\\"'),
    "one string of escapes": _repeat('\\"', head='"'),   # never closed: every quote in it is escaped
    "spaces": _repeat(" "),
    "newlines": _repeat("\n"),
    "blank lines then dot": _repeat(" \n", tail="."),
    ".visible lines": _repeat(".visible\n"),
    "mixed": _mixed,
}


FUNCTIONS: dict[str, Callable[[str], object]] = {
    "extract": extract,
    "cuda_kernels": cuda_kernels,
    "is_host_code": is_host_code,
    "defined_names": defined_names,
    "strip_comments": text_scan.strip_comments,
    "strip_comments(blank, text)": lambda s: text_scan.strip_comments(s, fill="blank", unclosed="text"),
    "join_splices": text_scan.join_splices,
    "replace_strings": lambda s: text_scan.replace_strings(s, keep_length=True),
    "remove_think": text_scan.remove_think,
    "assistant_text (refine)": assistant_text,     # a reply going back into the conversation
    "statement_parts": statement_parts,
    # inspect reads mask_comments, ptx_statement_spans, ptx_census, ptx_families, ptx_functions
    # and reachable; the launch check's thread bounds read ptx_functions and each entry's head.
    "inspect (no SASS)": lambda s: inspect(s, None),
    "parse_entry_params": parse_entry_params,
    "thread bounds": _thread_bounds,
    "demangled_base": lambda s: demangled_base("_Z" + s),
}


def _seconds(f: Callable[[str], object], text: str) -> float:
    """Seconds per call: short calls repeated until they add up to a few milliseconds."""
    t0 = time.perf_counter()
    f(text)
    once = time.perf_counter() - t0
    if once >= 0.003:
        return once
    n = min(200, int(0.003 / max(once, 1e-6)) + 1)
    t0 = time.perf_counter()
    for _ in range(n):
        f(text)
    return (time.perf_counter() - t0) / n


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_scanning_is_linear_on_adversarial_text(name):
    f = FUNCTIONS[name]
    slow = []
    for gen_name, make in GENERATORS.items():
        small_text, big_text = make(SMALL), make(BIG)
        small = min(_seconds(f, small_text) for _ in range(2))
        big = _seconds(f, big_text)
        # Below a millisecond, the cache and the clock decide the ratio. A quadratic cost this lets
        # through is under 16 ms at 1 MiB, so under 0.3 s at the 4 MiB a response may have.
        floor = max(small, 1e-3)
        if big / floor > MAX_RATIO:  # noise or growth: look again, the best of three
            big = min(big, *(_seconds(f, big_text) for _ in range(2)))
        if big / floor > MAX_RATIO or big > MAX_BIG_S:
            slow.append(f"{gen_name}: {small * 1e3:.2f} ms → {big * 1e3:.2f} ms (×{big / floor:.1f})")
    assert not slow, f"{name} is not linear on: " + "; ".join(slow)


def test_empty_fences_give_small_evidence():
    """500 000 empty fences before a kernel: the kernel is found and the evidence stays small."""
    response = "```\n```\n" * 500_000 + "```cuda\n" + KERNEL + "```\n"
    r = extract(response)
    assert r.ok and r.candidate is not None and "__global__" in r.candidate.code
    size = len(json.dumps(r.evidence))
    assert size < 32 << 10, size
    assert len(r.evidence["blocks"]) == MAX_LISTED and r.evidence["blocks_left_out"] == 500_001 - MAX_LISTED
    assert r.evidence["blocks_set_aside_left_out"] == 500_000 - MAX_LISTED


@pytest.mark.parametrize("letter", ["k", "\u00e9"])   # é: six bytes a character as JSON
def test_evidence_is_bounded_whatever_the_blocks_hold(letter):
    """Many different kernels with many long names, long tags and first lines: still bounded."""
    long = "k" + letter * 500
    blocks = []
    for i in range(60):
        names = "".join(f'extern "C" __global__ void {long}{i}_{j}(float* x) {{}}\n' for j in range(20))
        blocks.append(f"```cuda{letter * 300}\n{letter * 400} // first line\n{names}```\n")
    r = extract("".join(blocks))
    assert r.category == "ambiguous_candidate"
    size = len(json.dumps(r.evidence))
    assert size <= MAX_EVIDENCE_BYTES, size
    assert r.evidence["candidates_left_out"] >= 60 - MAX_LISTED
    assert r.evidence["candidates"][0]["entries_left_out"] == 20 - 8


def test_many_helper_blocks_make_a_short_origin():
    helpers = "".join(f"```cuda\n__device__ float h{i}(float v) {{ return v; }}\n```\n" for i in range(2000))
    r = extract(helpers + "```cuda\n" + KERNEL + "```\n")
    assert r.ok and r.candidate is not None
    assert len(r.candidate.origin) < 120, r.candidate.origin
    assert "(2001 blocks)" in r.candidate.origin
    assert r.evidence["blocks_used_left_out"] == 2001 - MAX_LISTED
    assert len(json.dumps(r.evidence)) < 32 << 10


# -- what the primitives read -----------------------------------------------------------------

def _random_texts(alphabet: list[str], n: int = 3000, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(n)]


def test_comments_are_read_as_the_old_single_pattern_read_them():
    """unclosed="text" finds the comments `//[^\\n]*|/\\*.*?\\*/` found, in one pass."""
    old = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
    for text in _random_texts(["/", "*", "a", "\n", " ", "/*", "*/", "//"]):
        assert list(text_scan.comment_spans(text, unclosed="text")) == [m.span() for m in old.finditer(text)], text


def test_an_unclosed_block_comment_runs_to_the_end_as_a_compiler_reads_it():
    text = "a // b /* c\nd /* e\nf */ g /* h\ni"
    assert list(text_scan.comment_spans(text)) == [(2, 11), (14, 23), (26, len(text))]
    assert text_scan.strip_comments(text) == "a \nd \n g \n"
    assert text_scan.strip_comments(text, fill="space") == "a  \nd   g  "
    blank = text_scan.strip_comments(text, fill="blank")
    assert len(blank) == len(text) and blank.count("\n") == text.count("\n") and blank.split() == ["a", "d", "g"]
    # Read as text, the unclosed `/*` leaves what follows it (prose such as `src/*.cu`).
    assert text_scan.strip_comments("see src/*.cu\nk();", fill="space", unclosed="text") == "see src/*.cu\nk();"


def test_strings_are_the_old_pattern_s_strings():
    old = re.compile(r'"(?:[^"\\\n]|\\.)*"')
    for text in _random_texts(['"', "\\", "a", "\n", '\\"', " "]):
        assert list(text_scan.string_spans(text)) == [m.span() for m in old.finditer(text)], text
    assert text_scan.replace_strings('x "a\\"b" y', keep_length=True) == 'x "    " y'
    assert text_scan.replace_strings('x "a\\"b" y', keep_length=False) == 'x "" y'


def test_think_sections_are_set_aside_and_an_unclosed_one_takes_the_rest():
    old = re.compile(r"<think>.*?</think>", re.S | re.I)
    for text in _random_texts(["<think>", "</think>", "<THINK>", "a", "\n"]):
        got = text_scan.remove_think(text)
        if not got.unclosed:
            assert got.text == old.sub("", text) and got.sections == len(old.findall(text)), text
    got = text_scan.remove_think("a<think>b</think>c<Think>d")
    assert got == text_scan.Reasoning("ac", 2, True)
    assert text_scan.remove_think("reasoning</think>answer") == text_scan.Reasoning("reasoning</think>answer", 0, False)


def test_splices_and_the_next_character():
    assert text_scan.join_splices("a \\  \nb\\\nc") == "a  b c"
    at = text_scan.NextChar("f(f(f(x);", ");")
    assert [at(i) for i in (0, 2, 7, 8, 9)] == [7, 7, 7, 8, -1]


def test_kernels_through_a_long_chain_of_macros():
    assert cuda_kernels(_define_chain(64 << 10))[-1] == "k"
    kernels = cuda_kernels(_function_macros(4 << 10))
    assert {"k0", "k1", "k2"} <= set(kernels) and len(kernels) == len(set(kernels)) > 100


def test_ptxas_messages_that_quote_the_candidate_are_classified_in_linear_time():
    """ptxas quotes the candidate ("Parsing error near '…'"): a 1 MB line of `.version` took the
    classifier 183 s when a rule retried `\\.version .*` from every occurrence."""
    from ptxbench.engine.ptxas_messages import parse_ptxas

    for n in (1 << 17, 1 << 20):
        line = "ptxas k.ptx, line 9; error   : Parsing error near '" + ".version " * (n // 9) + "': syntax error"
        started = time.perf_counter()
        [msg] = parse_ptxas(line)
        assert msg.category == "syntax" and len(msg.text) <= 2000
        assert time.perf_counter() - started < 1.0
