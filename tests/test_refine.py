"""Feedback between turns: what a judgement tells the model, from real ptxas verdicts and stored rows."""

from __future__ import annotations

from pathlib import Path

from ptxbench.db.records import Evaluation, Measurement, Sample
from ptxbench.engine.extract import extract
from ptxbench.db.judgement import evaluation_records
from ptxbench.models.judging import judge_sample
from ptxbench.models.refine import LOST_REPLY, assistant_text, conversation, feedback_message, is_final
from ptxbench.tasks.mutations import apply, load_mutations
from ptxbench.tasks.spec import get_task

SOLUTIONS = Path(__file__).resolve().parents[1] / "tasks" / "solutions"


def _judged(text: str, task_id: str) -> Evaluation:
    result = judge_sample(extract(text), get_task(task_id), gpu=False)
    return evaluation_records(result, 1, "test").evaluation


def _mutation(mid: str) -> str:
    v = apply(next(m for m in load_mutations() if m.id == mid))
    return f"```ptx\n{v.code}```\n" + (f"```json\n{v.manifest}```\n" if v.manifest else "")


def test_assembler_error_names_the_line_and_shows_it() -> None:
    evaluation = _judged(_mutation("gemm-old-version"), "gemm_bf16_sm90a")
    assert evaluation.category == "ptx_version" and evaluation.compiled is False
    text = feedback_message(get_task("gemm_bf16_sm90a"), evaluation, [])
    assert text.startswith("Your kernel was judged: ptx_version")
    assert "ptxas rejected it for sm_90a" in text and evaluation.evidence["message"] in text
    assert "Assembler output:" in text and "```" in text
    assert text.rstrip().endswith("if you do not use the default launch.")


def test_syntax_error_shows_the_lines_before_the_reported_one() -> None:
    reply = _mutation("add-missing-semicolon")
    evaluation = _judged(reply, "vector_add_smoke")
    line = evaluation.evidence["line"]
    code = extract(reply).candidate.code
    sample = Sample(task_id="vector_add_smoke", language="ptx", source="test", code=code)
    text = feedback_message(get_task("vector_add_smoke"), evaluation, [], sample)
    assert f"Around line {line} of the PTX" in text
    assert f"{line - 1:>5} | " in text and f"{line:>5} | " in text


def test_missing_families_are_listed_with_where_they_are_missing() -> None:
    vec = (SOLUTIONS / "vector_add_smoke" / "kernel.ptx").read_text()
    # Launched as the manifest says (four arguments that fit its parameters), so only the families are missing.
    launch = '{"launches": [{"entry": "vector_add", "args": ["A", "B", "C", "i32:M"]}]}'
    evaluation = _judged(f"```ptx\n{vec}```\n```json\n{launch}\n```\n", "gemm_bf16_sm90a")
    assert evaluation.category == "required_missing_ptx" and evaluation.uses_ptx is False
    text = feedback_message(get_task("gemm_bf16_sm90a"), evaluation, [])
    for family in ("wgmma", "tma", "mbarrier"):
        assert f"- {family}: not in the PTX" in text


def test_assembler_warnings_reach_the_model() -> None:
    # Measured with ptxas 13.0: setmaxnreg in a kernel whose entry register budget is unknown.
    ptx = """.version 9.0
.target sm_90a
.address_size 64
.visible .entry rmsnorm(.param .u64 x, .param .u64 w, .param .u64 y, .param .u32 t, .param .u32 d)
{
  .reg .b32 %r<3>;
  .reg .pred %p;
  mov.u32 %r1, %tid.x;
  setp.lt.u32 %p, %r1, 128;
  @%p bra DONE;
  setmaxnreg.dec.sync.aligned.u32 40;
DONE:
  ret;
}
"""
    evaluation = _judged(f"```ptx\n{ptx}```", "rmsnorm_bf16_sm90a")
    text = feedback_message(get_task("rmsnorm_bf16_sm90a"), evaluation, [])
    assert "Assembler warnings:" in text and "(C7508)" in text and "setmaxnreg" in text


def test_extract_failures_restate_the_format() -> None:
    two = "```ptx\n.version 9.0\n.target sm_90a\n.address_size 64\n.visible .entry a() { ret; }\n```\n" \
          "```ptx\n.version 9.0\n.target sm_90a\n.address_size 64\n.visible .entry b() { ret; }\n```\n"
    evaluation = _judged(two, "vector_add_smoke")
    assert evaluation.category == "ambiguous_candidate" and evaluation.compiled is None
    text = feedback_message(get_task("vector_add_smoke"), evaluation, [])
    assert text.startswith("Your reply was judged: ambiguous_candidate")
    assert "2 different kernels" in text and "exactly one fenced code block" in text
    assert "Instruction families found" not in text


def _gpu_evaluation(category: str, **kw) -> Evaluation:
    return Evaluation(sample_id=1, engine_version="t", status="judged", category=category, source="test",
                      compiled=True, uses_ptx=True, uses_sass=True, ptx_families=["wgmma", "tma", "mbarrier"], **kw)


def test_wrong_elements_are_reported_at_train_sizes_only() -> None:
    task = get_task("gemm_bf16_sm90a")
    crash = {"N": 4096, "M": 4096, "K": 4096}            # keys in another order than the measurement's
    evaluation = _gpu_evaluation("wrong_result", correct=False, evidence={"sizes": [
        {"split": "train", "sizes": crash, "category": "runtime_other", "message": "size 1: CUDA_ERROR_LAUNCH_FAILED"},
        {"split": "heldout", "sizes": task.heldout[0], "category": "wrong_result", "message": "HELDOUT DETAIL"}]})
    measurements = [
        Measurement(split="train", sizes=task.train[0], category="wrong_result", max_rel_err=0.71,
                    worst={"index": [17, 3], "got": 1.5, "expected": -0.25, "output": "C", "tolerance": 0.01}),
        Measurement(split="train", sizes=task.train[1], category="runtime_other"),
        Measurement(split="train", sizes=task.train[2], category="ok", max_rel_err=0.001),
        Measurement(split="heldout", sizes=task.heldout[0], category="wrong_result", max_rel_err=0.9),
    ]
    text = feedback_message(task, evaluation, measurements)
    assert ("M=2048, N=2048, K=2048}: wrong_result, error 0.71 (tolerance 0.01); worst element C[17, 3]: got 1.5, "
            "expected -0.25") in text
    assert "M=4096, N=4096, K=4096}: runtime_other\n  size 1: CUDA_ERROR_LAUNCH_FAILED" in text
    assert "M=8192, N=7168, K=5120}: ok" in text
    held = task.heldout[0]
    assert f"N={held['N']}" not in text and "HELDOUT" not in text and "0.9" not in text


def test_speed_against_the_library_is_reported() -> None:
    task = get_task("gemm_bf16_sm90a")
    evaluation = _gpu_evaluation("slower_than_baseline", correct=True, time_ms=1.25, baseline_ms=1.0,
                                 speedup=0.8, tflops=470.0)
    text = feedback_message(task, evaluation, [Measurement(split="train", sizes=task.headline, category="ok")])
    assert "your kernel 1.25 ms, the library (cublas) 1 ms, speedup 0.800×, 470.0 TFLOP/s" in text
    assert "must be faster than the library" in text
    assert not is_final(evaluation) and is_final(_gpu_evaluation("ok", correct=True, speedup=1.1))


def test_a_reply_cut_at_the_token_limit_is_said_so() -> None:
    evaluation = _gpu_evaluation("no_candidate", evidence={"response": {"finish_reason": "length"},
                                                           "extract": {"reason": "the response is empty"}})
    text = feedback_message(get_task("vector_add_smoke"), evaluation, [])
    assert "cut off at the token limit" in text and "the response is empty" in text


def test_conversation_replays_turns_and_sets_reasoning_aside() -> None:
    base = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    reply = "<think>long thoughts</think>\n```ptx\ncode\n```"
    assert assistant_text(reply) == "```ptx\ncode\n```"
    assert assistant_text(None) == LOST_REPLY and assistant_text("x", malformed=True) == LOST_REPLY
    messages = conversation(base, [("r1", "f1"), ("r2", "f2")])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in messages[2:]] == ["r1", "f1", "r2", "f2"]
    assert conversation(base, []) == base
