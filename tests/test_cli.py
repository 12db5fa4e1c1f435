"""The command line: bad input gives one clear line and exit code 2; a small bench writes all
its outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

CLI = [sys.executable, "-m", "inframind_ray.cli"]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, cwd=cwd)


def _pool(tmp_path: Path, text: str) -> str:
    p = tmp_path / "pool.yaml"
    p.write_text(text)
    return str(p)


GOOD_MODEL = """
  - name: m1
    recorded: Yi-34B
    profile: llama2-70b@h100x4
    gpu: H100-80GB
    gpus_per_replica: 2
"""


@pytest.mark.parametrize(
    "args,field",
    [
        (["--rates", "0"], "rates"),
        (["--rates", "10,-5"], "rates"),
        (["--rates", "ten"], "rates"),
        (["--split", "nope"], "split"),
        (["--split", ""], "split"),
        (["--queries", "0"], "queries"),
        (["--queries", "100000"], "queries"),
        (["--policies", "always-strongest,magic"], "policies"),
        (["--arrivals", "trace:nowhere"], "arrivals"),
        (["--pool", "no-such-pool"], "pool"),
        (["--budget", "30"], "budget"),
        (["--engine", "gpu"], "engine"),
        (["--metrics-period", "-1"], "metrics-period"),
        (["--policies", "inframind", "--checkpoint", "/nonexistent"], "checkpoint"),
        (["--tasks", "gsm9k"], "tasks"),
        (["--mix", "gsm8k=0.5,math=lots"], "mix"),
        (["--mix", "gsm8k=1.2,math"], "mix"),
        (["--scheduling", "edf,lifo"], "scheduling"),
    ],
)
def test_bad_input_one_line_exit_2(args, field, tmp_path):
    """Each bad value: exit 2, one stderr line naming the field, no traceback."""
    r = run("bench", "--queries", "5", "--out", str(tmp_path / "o"), "--no-progress", *args)
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    assert field in lines[0] and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "text,field",
    [
        ("models: [unclosed", "pool"),
        ("- just a list", "pool"),
        ("models: []", "pool.models"),
        ("models:" + GOOD_MODEL.replace("Yi-34B", "GPT-9"), "pool.models.0.recorded"),
        ("models:" + GOOD_MODEL.replace("llama2-70b@h100x4", "x@y"), "pool.models.0.profile"),
        ("models:" + GOOD_MODEL + "    max_num_seqs: 0\n", "pool.models.0.max_num_seqs"),
        ("models:" + GOOD_MODEL + "    colour: red\n", "pool.models.0.colour"),
        ("engine: {scheduling: lifo}\nmodels:" + GOOD_MODEL, "pool.engine.scheduling"),
        ("models:" + GOOD_MODEL + GOOD_MODEL, "duplicate"),
        ("models:" + GOOD_MODEL.replace("gpus_per_replica: 2", "gpus_per_replica: 1"), "m1"),
    ],
)
def test_bad_pool_file(text, field, tmp_path):
    """An invalid pool file or unknown model: one line naming the field, exit 2."""
    r = run("bench", "--pool", _pool(tmp_path, text), "--queries", "5", "--no-progress",
            "--out", str(tmp_path / "o"))
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and field in lines[0], r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("cmd", [["bench"], ["twin", "profile"], ["train"]])
def test_unknown_option_is_a_usage_error(cmd):
    """A mistyped option: click's usage message and exit 2, never a traceback."""
    r = run(*cmd, "--no-such-option")
    assert r.returncode == 2, r.stderr
    assert "No such option" in r.stderr and "Traceback" not in r.stderr


def test_help_on_every_command():
    """--help works everywhere."""
    for cmd in ([], ["bench"], ["pools"], ["embed"], ["train"], ["predictors"]):
        r = run(*cmd, "--help")
        assert r.returncode == 0 and "Usage" in r.stdout


def test_small_bench_writes_everything(tmp_path):
    """A two-policy, two-rate bench writes results.json, Parquet records and four plots."""
    out = tmp_path / "b"
    r = run("bench", "--rates", "10,300", "--policies", "always-strongest,least-loaded",
            "--queries", "40", "--seed", "1", "--out", str(out), "--no-progress", "--jobs", "1")
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "results.json").read_text())
    assert {"engine", "pool", "seed", "split", "budget_distribution", "wall_s",
            "simulated_s"} <= doc["meta"].keys()
    assert doc["meta"]["split"] == "test"
    assert len(doc["rows"]) == 4
    for row in doc["rows"]:
        for k in ("policy", "rate_per_min", "n_queries", "goodput", "accuracy",
                  "slo_attainment", "latency_mean_s", "latency_p95_s", "latency_p99_s",
                  "model_mix", "strategy_mix", "topology_mix"):
            assert k in row
        assert row["n_queries"] == 40
    assert pq.read_table(out / "queries.parquet").num_rows == 160
    assert pq.read_table(out / "calls.parquet").num_rows >= 160
    for png in ("goodput.png", "latency_cdf.png", "queue_depth.png", "mix.png"):
        assert (out / png).stat().st_size > 5000
    assert "always-strongest" in r.stdout


@pytest.mark.parametrize(
    "args,field",
    [
        (["--task", "gsm9k", "--item-id", "0", "--answer", "1"], "task"),
        (["--task", "mbpp", "--item-id", "99999", "--answer", "x = 1"], "item-id"),
        (["--task", "humaneval", "--item-id", "0", "--answer", "def f(:\n  pass"], "answer"),
        (["--task", "humaneval", "--reference", "1", "--answer", "x = 1"], "reference"),
        (["--task", "gsm8k", "--item-id", "0"], "answer"),
        (["--task", "gsm8k", "--item-id", "0", "--answer-file", "/nonexistent"], "answer-file"),
    ],
)
def test_grade_bad_input_one_line_exit_2(args, field):
    """`inframind grade`: an unknown task, an item id outside its family, code that does not
    parse: exit 2 and one line naming the field."""
    r = run("grade", *args)
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_grade_exit_code_is_the_verdict(tmp_path):
    """Exit 0 for a correct answer, 1 for a wrong one; code is graded in the sandbox."""
    assert run("grade", "--task", "gsm8k", "--item-id", "0", "--answer",
               "The answer is 18.").returncode == 0
    assert run("grade", "--task", "gsm8k", "--item-id", "0", "--answer", "17").returncode == 1
    sol = tmp_path / "sol.py"
    sol.write_text("def add(x, y):\n    return x - y\n")
    r = run("grade", "--task", "humaneval", "--item-id", "53", "--answer-file", str(sol))
    assert r.returncode == 1 and "wrong" in r.stdout
    assert run("grade", "--task", "math", "--reference", "\\frac{1}{2}", "--answer",
               "$\\boxed{0.5}$").returncode == 0
