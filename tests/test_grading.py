"""The graders (inframind_ray.grading) on the shipped task data: every reference answer grades
correct, wrong answers do not, and the recorded ZeroEval outputs grade as ZeroEval's own scorer
did up to a measured floor (experiments/grader_references.py prints the full figures)."""

from __future__ import annotations

import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import inframind_ray
from inframind_ray.grading import (
    FAMILIES,
    GradingInputError,
    check_syntax,
    extract_code,
    extract_letter,
    extract_math_answer,
    extract_number,
    grade,
    math_answer,
    math_equal,
)
from inframind_ray.grading.final_answer import boxed_contents
from inframind_ray.tasks.prompts import extract_answer

TASKS = Path(inframind_ray.__file__).parent / "data" / "tasks"
WORKERS = 2

# MBPP reference programs that fail their own tests (dataset issues): none, once the
# test_setup_code runs after the code (items 367 and 927 build trees of the solution's Node).
KNOWN_MBPP_FAILURES: frozenset[int] = frozenset()
# MATH reference solutions that do not grade correct against their own last \boxed{}: none.
KNOWN_MATH_REFERENCE_FAILURES: frozenset[int] = frozenset()
# Lowest per-model agreement with ZeroEval's scorer, measured (experiments/grader_references.py).
# Where they disagree ours is mostly right: ZeroEval takes the first number of the answer field
# ("1500 - 1090 - 157 - 74 - 102 = 77" scores 1500; "46\sqrt{2}" scores 46).
GSM8K_AGREEMENT_FLOOR = 0.965  # all 18,466 outputs: lowest model 0.9674 (Yi-1.5-34B-Chat)
MATH_AGREEMENT_FLOOR = 0.965  # items with id % 7 == 0 (1,751 outputs): lowest model 0.9709
# (Yi-1.5-9B-Chat); all 12,257 outputs: lowest 0.9695 (Yi-1.5-9B-Chat and Yi-1.5-34B-Chat)
MATH_SAMPLE_EVERY = 7


def _rows(family: str, name: str = "items") -> list[dict]:
    return pq.read_table(TASKS / family / f"{name}.parquet").to_pylist()


def _grade_all(family: str, pairs: list[tuple[str, dict]]) -> list:
    with ThreadPoolExecutor(WORKERS) as ex:
        return list(ex.map(lambda p: grade(family, p[0], p[1]), pairs))


# ---------------------------------------------------------------------------- the interface


def test_registry_names_the_families():
    assert set(FAMILIES) == {"mmlu_pro", "gsm8k", "math", "humaneval", "mbpp"}
    with pytest.raises(ValueError, match="unknown task family 'chess'.*gsm8k.*mmlu_pro"):
        grade("chess", "e4", {})


# -------------------------------------------------------------------------------- MMLU-Pro


@pytest.mark.parametrize("text", [
    "The answer is (C).", "the answer is d", "I think the answer is (B) but the answer is (E)",
    "B", "(J)", " a. ", "K", "", None, "The answer is (Z)", "no letter here", "C D",
])
def test_letter_extraction_matches_the_prompts(text):
    assert extract_letter(text) == extract_answer(text)


def test_mmlu_pro_grade():
    assert grade("mmlu_pro", "So the answer is (B).", {"reference": "B"}).correct
    assert not grade("mmlu_pro", "So the answer is (C).", {"answer": "B"}).correct
    r = grade("mmlu_pro", "no idea", {"reference": "B"})
    assert not r.correct and r.extracted is None


# ----------------------------------------------------------------------------------- GSM8K


@pytest.mark.parametrize("text, value", [
    ("work...\n#### 1,200", 1200), ("The answer is $18.", 18), ('{"answer": "3/4"}', 0.75),
    ("so \\boxed{-5}", -5), ("it costs 12 dollars in total.", 12), ('"answer": "2:00 pm"', 2),
    ("\\frac{3}{4}", 0.75), ("The answer is −7", -7), ('"answer": "5 + 3 = 8"', 8),
    ('"answer": "18 (9 eggs * $2)"', 18), ("3-4 apples, so 10.5", 10.5),
    ('{"reasoning": "the answer is 5", "answer": "6"}', 6),
    ('```json\n{"answer": "42"}\n```\nQuestion: next one\n{"answer": "7"}', 42),
    ("#### Step 1: add\n2 + 2 = 4", 4),
])
def test_number_extraction(text, value):
    got = extract_number(text)
    assert got is not None and got[1] == pytest.approx(value)


def test_gsm8k_every_reference_solution_grades_correct():
    items = _rows("gsm8k")
    assert len(items) == 1319
    wrong = [r["item_id"] for r in items if not grade("gsm8k", r["solution"], r).correct]
    assert wrong == []
    for r in items:  # and one off never does
        off = float(r["reference"].replace(",", "")) + 1
        assert not grade("gsm8k", f"#### {off:g}", r).correct


def test_gsm8k_recorded_outputs_agree_with_zeroeval():
    ref = {r["item_id"]: r for r in _rows("gsm8k")}
    per: dict[str, list[bool]] = defaultdict(list)
    for r in _rows("gsm8k", "recorded_outputs"):
        per[r["model"]].append(grade("gsm8k", r["output"], ref[r["item_id"]]).correct
                               == bool(r["correct"]))
    assert len(per) == 14
    agreement = {m: sum(v) / len(v) for m, v in per.items()}
    assert min(agreement.values()) >= GSM8K_AGREEMENT_FLOOR, agreement


# ------------------------------------------------------------------------------------ MATH


@pytest.mark.parametrize("text, answer", [
    ("so $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"), ('{"answer": "\\\\sqrt{2}"}', "\\sqrt{2}"),
    ('{"answer": "\\frac{3}{4}"}', "\\frac{3}{4}"), ("The answer is $42$.", "42"),
    ("no answer", None),
])
def test_math_answer_extraction(text, answer):
    assert extract_math_answer(text) == answer


@pytest.mark.parametrize("reference, answer, equal", [
    ("\\frac{1}{2}", "0.5", True), ("\\frac{1}{2}", "1/2", True), ("2\\sqrt{2}", "\\sqrt{8}", True),
    ("(1,2)", "(1, 2)", True), ("-15", "15", False), ("x^2+2x+1", "(x+1)^2", True),
    ("\\$6", "6", True), ("10", "10\\%", True),
])
def test_math_equivalence(reference, answer, equal):
    assert math_equal(reference, answer)[0] is equal


def test_math_verify_failures_grade_false_and_are_recorded(monkeypatch):
    import math_verify

    def boom(*args, **kwargs):
        raise RuntimeError("sympy exploded")

    monkeypatch.setattr(math_verify, "verify", boom)
    r = grade("math", "\\boxed{3}", {"reference": "3"})
    assert not r.correct and "RuntimeError: sympy exploded" in r.detail


def test_math_grade_off_the_main_thread_is_bounded(monkeypatch):
    out = []
    t = threading.Thread(target=lambda: out.append(grade("math", "\\boxed{4}",
                                                         {"reference": "4"})))
    t.start()
    t.join(30)
    assert out and out[0].correct
    release = threading.Event()
    monkeypatch.setattr(math_answer, "_verify", lambda *a: release.wait(30))
    slow = []
    t = threading.Thread(target=lambda: slow.append(math_equal("1", "1", timeout_s=0.2)))
    t.start()
    t.join(5)
    release.set()
    assert slow == [(False, "math-verify timed out after 0.6 s")]


def test_math_every_reference_solution_grades_correct():
    sols = _rows("math", "reference_solutions")
    assert len(sols) == 1000
    failures = set()
    for r in sols:
        boxed = boxed_contents(r["solution"])
        if not boxed or not grade("math", r["solution"], {"reference": boxed[-1][1]}).correct:
            failures.add(r["ref_id"])
    assert 1 - len(failures) / len(sols) >= 0.999
    assert failures == KNOWN_MATH_REFERENCE_FAILURES


def test_math_recorded_outputs_agree_with_zeroeval():
    ref = {r["item_id"]: r for r in _rows("math")}
    per: dict[str, list[bool]] = defaultdict(list)
    for r in _rows("math", "recorded_outputs"):
        if r["item_id"] % MATH_SAMPLE_EVERY == 0:
            per[r["model"]].append(grade("math", r["output"], ref[r["item_id"]]).correct
                                   == bool(r["correct"]))
    assert len(per) == 17
    agreement = {m: sum(v) / len(v) for m, v in per.items()}
    assert min(agreement.values()) >= MATH_AGREEMENT_FLOOR, agreement


# ------------------------------------------------------------------------------------ code


def test_code_extraction():
    text = ("Here:\n```python\ndef f(x):\n    return x\n```\nUsage:\n```python\nprint(f(1))\n```\n"
            "```text\nout\n```")
    assert extract_code(text) == "print(f(1))"
    assert extract_code(text, "f") == "def f(x):\n    return x"
    assert extract_code("```\ncode\n```") == "code"
    assert extract_code("def g(): pass\n") == "def g(): pass"
    assert extract_code("```python\ndef h():\n    return 1\n") == "def h():\n    return 1"


def test_check_syntax_names_the_line():
    check_syntax("x = 1\n")
    with pytest.raises(GradingInputError, match="code answer does not parse: line 2: "):
        check_syntax("x = 1\ndef (:\n")
    with pytest.raises(GradingInputError, match="line 1"):
        check_syntax("    return (\n", prefix="def f():\n")


def test_humaneval_canonical_solutions_pass_and_wrong_ones_fail():
    items = _rows("humaneval")
    assert len(items) == 164
    good = _grade_all("humaneval", [(r["reference"], r) for r in items])
    assert [r["item_id"] for r, g in zip(items, good, strict=True) if not g.correct] == []
    bad = _grade_all("humaneval", [("    return None\n", r) for r in items[:40]])
    assert not any(g.correct for g in bad)


def test_humaneval_response_forms():
    item = _rows("humaneval")[0]
    full = item["prompt"] + item["reference"]
    chat = f"Sure! Here it is:\n\n```python\n{full}\n```\n\nIt compares every pair."
    assert grade("humaneval", chat, item).correct  # a full function in a fenced block
    assert not grade("humaneval", "    return (\n", item).correct  # a model's bad syntax
    with pytest.raises(GradingInputError, match="line 1"):
        grade("humaneval", "    return (\n", item, strict=True)  # a user's bad syntax
    with pytest.raises(GradingInputError, match="empty"):
        grade("humaneval", "  ", item, strict=True)


def test_mbpp_reference_programs_pass():
    items = _rows("mbpp")
    assert len(items) == 974
    res = _grade_all("mbpp", [(r["reference"], r) for r in items])
    failing = {r["item_id"] for r, g in zip(items, res, strict=True) if not g.correct}
    assert failing <= KNOWN_MBPP_FAILURES, {i: g.detail for i, g in zip(
        [r["item_id"] for r in items], res, strict=True) if i in failing}


def test_mbpp_wrong_code_fails():
    items = _rows("mbpp")[:10]
    res = _grade_all("mbpp", [("def nothing():\n    return None\n", r) for r in items])
    assert not any(g.correct for g in res)
    fenced = f"```python\n{items[0]['reference']}\n```"
    assert grade("mbpp", fenced, items[0]).correct
