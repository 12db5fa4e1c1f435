"""Graders of the task families and the code sandbox they run programs in.

One module per job: ``letter`` (MMLU-Pro option letters), ``numeric`` (GSM8K numbers),
``math_answer`` (MATH answers via math-verify), ``code`` (HumanEval/MBPP programs),
``final_answer`` (where a response states its answer), ``sandbox`` (contained Python
processes), ``registry`` (``grade(family, response, item)``). Imports only the standard library,
numpy and math-verify.
"""

from inframind_ray.grading.code import check_syntax, extract_code, grade_humaneval, grade_mbpp
from inframind_ray.grading.letter import extract_letter, grade_letter
from inframind_ray.grading.math_answer import extract_math_answer, grade_math, math_equal
from inframind_ray.grading.numeric import extract_number, grade_number, parse_number
from inframind_ray.grading.registry import CODE_FAMILIES, FAMILIES, grade, grader
from inframind_ray.grading.result import GradeResult, GradingInputError
from inframind_ray.grading.sandbox import (
    DEFAULT_LIMITS,
    SandboxLimits,
    SandboxResult,
    SandboxWarning,
    Status,
    isolation,
    run_python,
)

__all__ = [
    "CODE_FAMILIES", "DEFAULT_LIMITS", "FAMILIES", "GradeResult", "GradingInputError",
    "SandboxLimits",
    "SandboxResult", "SandboxWarning", "Status", "check_syntax", "extract_code",
    "extract_letter", "extract_math_answer", "extract_number", "grade", "grade_humaneval",
    "grade_letter", "grade_math", "grade_mbpp", "grade_number", "grader", "isolation",
    "math_equal", "parse_number", "run_python",
]
