"""Derive the compact data files the package ships from the licensed raw data in ``../shared/data``.

Run from the repository root::

    python scripts/derive_data.py --shared ../shared/data

Writes, under ``inframind_ray/data/``:

* ``mmlu_pro/questions.parquet``: the 12,032 MMLU-Pro questions with options, answer, category and
  the fixed train/val/test split (rule in :func:`split_of`).
* ``mmlu_pro/outcomes.parquet``: the recorded per-item answers of the 25 open models (predicted
  letter, correct, output length in characters and words).
* ``traces/*.parquet``: request arrival times (seconds from the first request) and token counts of
  the Azure 2023 code/conversation traces and the Mooncake conversation trace.
* ``licenses/`` and ``ATTRIBUTION.md``: the licences and origin of everything above.

The package never reads ``../shared`` at run time; this script is the only bridge.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

SPLIT_SALT = "inframind-mmlu-pro-v1"
TRAIN_PCT, VAL_PCT = 60, 20  # the rest (20 %) is the test split


def split_of(question_id: int) -> str:
    """Fixed split by question id: sha256("inframind-mmlu-pro-v1:<id>") mod 100 → 60/20/20."""
    h = int(hashlib.sha256(f"{SPLIT_SALT}:{question_id}".encode()).hexdigest(), 16) % 100
    if h < TRAIN_PCT:
        return "train"
    return "val" if h < TRAIN_PCT + VAL_PCT else "test"


def derive_mmlu(src: Path, out: Path) -> None:
    """Questions (with split) and per-item outcomes as Parquet."""
    rows = []
    with gzip.open(src / "derived" / "mmlu_pro_questions.jsonl.gz", "rt") as f:
        for line in f:
            rows.append(json.loads(line))
    qid = [int(r["question_id"]) for r in rows]
    table = pa.table(
        {
            "question_id": pa.array(qid, pa.int32()),
            "category": [r["category"] for r in rows],
            "src": [r["src"] for r in rows],
            "question": [r["question"] for r in rows],
            "options": pa.array([r["options"] for r in rows], pa.list_(pa.string())),
            "answer": [r["answer"] for r in rows],
            "split": [split_of(q) for q in qid],
        }
    ).sort_by("question_id")
    pq.write_table(table, out / "mmlu_pro" / "questions.parquet", compression="zstd")

    csv = pacsv.read_csv(
        src / "derived" / "mmlu_pro_per_item_outcomes.csv.gz",
        convert_options=pacsv.ConvertOptions(
            column_types={"pred": pa.string(), "answer": pa.string()},
            strings_can_be_null=True,
        ),
    )
    models = [m.removesuffix("_5shots") for m in csv.column("model").to_pylist()]
    outcomes = pa.table(
        {
            "model": pa.array(models),
            "question_id": csv.column("question_id").cast(pa.int32()),
            "pred": csv.column("pred").fill_null(""),
            "correct": csv.column("correct").cast(pa.bool_()),
            "gen_chars": csv.column("gen_chars").cast(pa.int32()),
            "gen_words": csv.column("gen_words").cast(pa.int32()),
        }
    ).sort_by([("model", "ascending"), ("question_id", "ascending")])
    outcomes = outcomes.set_column(0, "model", outcomes.column("model").dictionary_encode())
    pq.write_table(outcomes, out / "mmlu_pro" / "outcomes.parquet", compression="zstd")
    n_split = {s: sum(1 for q in qid if split_of(q) == s) for s in ("train", "val", "test")}
    print(f"mmlu_pro: {len(qid)} questions {n_split}, {outcomes.num_rows} outcome rows")


def _write_trace(name: str, t_s: np.ndarray, prompt: np.ndarray, output: np.ndarray, out: Path):
    order = np.argsort(t_s, kind="stable")
    t_s = t_s[order] - t_s[order][0]
    table = pa.table(
        {
            "t_s": pa.array(t_s, pa.float64()),
            "prompt_tokens": pa.array(prompt[order], pa.int32()),
            "output_tokens": pa.array(output[order], pa.int32()),
        }
    )
    pq.write_table(table, out / "traces" / f"{name}.parquet", compression="zstd")
    rate = (len(t_s) - 1) / t_s[-1] * 60
    print(f"trace {name}: {len(t_s)} requests over {t_s[-1]:.0f} s ({rate:.0f} req/min)")


def derive_traces(shared: Path, out: Path) -> None:
    """Azure 2023 (code, conv) and Mooncake conversation arrivals."""
    for kind in ("code", "conv"):
        t = pacsv.read_csv(
            shared / "azure_llm_inference_2023" / "data" / f"AzureLLMInferenceTrace_{kind}.csv",
            convert_options=pacsv.ConvertOptions(column_types={"TIMESTAMP": pa.string()}),
        )
        ts = np.array(t.column("TIMESTAMP").to_pylist(), dtype="datetime64[us]")
        t_s = (ts - ts.min()).astype(np.float64) / 1e6
        _write_trace(
            f"azure_{kind}",
            t_s,
            t.column("ContextTokens").to_numpy(),
            t.column("GeneratedTokens").to_numpy(),
            out,
        )
    recs = []
    path = shared / "mooncake_traces" / "FAST25-release" / "traces" / "conversation_trace.jsonl"
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            recs.append((r["timestamp"] / 1000.0, r["input_length"], r["output_length"]))
    arr = np.array(recs)
    _write_trace("mooncake_conv", arr[:, 0], arr[:, 1].astype(int), arr[:, 2].astype(int), out)


ATTRIBUTION = """# Data shipped with inframind_ray

Derived by `scripts/derive_data.py` from the licensed data in the project's `shared/data/`
(no new data; only selection, renaming and re-encoding). Licences are in `licenses/`.

| file | origin | licence |
|---|---|---|
| `mmlu_pro/questions.parquet` | MMLU-Pro questions (TIGER-AI-Lab/MMLU-Pro, commit f418b116db00b065c2aea046518d8fcf74d39872) + our split column | Apache-2.0 (repository), MIT (dataset card) — `licenses/MMLU-Pro-LICENSE` |
| `mmlu_pro/outcomes.parquet` | recorded 5-shot CoT answers of 25 open models, `eval_results/model_outputs_<model>_5shots.zip` of the same repository | as above |
| `traces/azure_code.parquet`, `traces/azure_conv.parquet` | Azure LLM inference trace 2023 (Azure/AzurePublicDataset, commit b469a113cedca53ddc3bdea71a143dc4b7d8700c); Patel et al., "Splitwise", ISCA 2024 | CC-BY-4.0 — `licenses/Azure-LICENSE` |
| `traces/mooncake_conv.parquet` | Mooncake FAST'25 conversation trace (kvcache-ai/Mooncake, commit 3b5a594133958449a1feaf1c9e0fc1b553e34a28) | Apache-2.0 — `licenses/Mooncake-LICENSE` |
| `profiles.json` | fitted by `scripts/fit_profiles.py` from Argonne LLM-Inference-Bench (argonne-lcf/LLM-Inference-Bench, commit 4211f5d4e9bc0145ed541b6d372d5d8223b44235) and splitwise-sim (Mutinifni/splitwise-sim, commit 8f99e7dc9b407f4ce2488d03dd44c0b8b946dab0) | BSD-3-Clause — `licenses/Argonne-LICENSE`; MIT — `licenses/splitwise-sim-LICENSE` |

Split rule (fixed, by question id): `sha256("inframind-mmlu-pro-v1:<question_id>") mod 100`:
0-59 train, 60-79 val, 80-99 test.
"""


def copy_licenses(shared: Path, out: Path) -> None:
    """Copy every licence the derived files rest on."""
    lic = out / "licenses"
    pairs = {
        "MMLU-Pro-LICENSE": shared / "mmlu_pro_model_outputs" / "LICENSE",
        "Azure-LICENSE": shared / "azure_llm_inference_2023" / "LICENSE",
        "Mooncake-LICENSE": shared / "mooncake_traces" / "LICENSE-APACHE",
        "Argonne-LICENSE": next((shared / "argonne_llm_inference_bench").glob("LICENSE*")),
        "splitwise-sim-LICENSE": shared / "splitwise_sim_perf_model" / "LICENSE",
    }
    for name, path in pairs.items():
        shutil.copyfile(path, lic / name)
    (out / "ATTRIBUTION.md").write_text(ATTRIBUTION)


def main() -> None:
    """Entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", type=Path, default=Path("../shared/data"), help="raw data folder")
    ap.add_argument(
        "--out", type=Path, default=Path("inframind_ray/data"), help="package data folder"
    )
    args = ap.parse_args()
    for sub in ("mmlu_pro", "traces", "licenses"):
        (args.out / sub).mkdir(parents=True, exist_ok=True)
    derive_mmlu(args.shared / "mmlu_pro_model_outputs", args.out)
    derive_traces(args.shared, args.out)
    copy_licenses(args.shared, args.out)


if __name__ == "__main__":
    main()
