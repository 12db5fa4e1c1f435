"""Every number the twin uses that the recorded data does not give: ONE place, each with why.

The recorded data gives, per (model, MMLU-Pro item): the step-by-step (5-shot CoT) answer letter,
whether it is correct, and its length. The measured GPU data gives iteration times per model and
GPU (see docs/profiles.md). Everything else is assumed here; docs/twin.md lists these values.
"""

from __future__ import annotations

from inframind_ray.core.strategy import Strategy

# --- text -> tokens -----------------------------------------------------------------------------
TOKENS_PER_WORD = 1.33
"""Llama/Mistral BPE tokenisers give ~0.75 English words per token (a common rule of thumb)."""

FEW_SHOT_EXAMPLES = 5
"""A DeepThink call carries 5 worked examples of the item's category, as the 5-shot CoT prompts
that produced the recorded answers did. Their length per category = 5 x (mean question+options
tokens + mean recorded CoT answer tokens of the 25 models) on the train split. Flash and Concise
prompts are zero-shot."""

PROMPT_OVERHEAD_TOKENS = 60
"""System, role, strategy and answer-format instructions of one agent prompt (prompts.py, ~45
words). Upstream answers add their own output tokens to a node's prompt."""

# --- strategies (Flash / Concise relative to the recorded step-by-step answer) -----------------
STRATEGY_RETENTION = {Strategy.FLASH: 0.80, Strategy.CONCISE: 0.93, Strategy.DEEPTHINK: 1.0}
"""Probability that a recorded-correct answer stays correct under the strategy. DeepThink IS the
recorded answer. Flash: the MMLU-Pro paper reports chain of thought adds roughly a fifth of the
accuracy over direct answering on MMLU-Pro (its CoT vs direct ablation), so direct answers keep
~80 %. Concise: concise CoT (Renze & Guven, 2024) cut length about in half with a small accuracy
loss. A recorded-wrong answer stays wrong (same letter) under every strategy."""

STRATEGY_LENGTH = {
    Strategy.FLASH: (0.0, 6, 12),
    Strategy.CONCISE: (0.40, 24, 160),
    Strategy.DEEPTHINK: (1.0, 8, 100_000),
}
"""(fraction of the recorded length, min, max) output tokens. Flash answers with a letter and a
short sentence (~6-12 tokens, whatever the model); Concise with 2-3 points (~40 % of the full
reasoning, bounded). DeepThink = the recorded length."""

MAX_TOKENS_QUANTILE = 0.999
"""DeepThink max_tokens of a model = this quantile of its recorded lengths on the train split
(model-aware: the authors' global 256-token cap truncated 97.8 % of a reasoning model's answers).
Flash and Concise caps are the upper bounds above. An answer longer than its cap is truncated and
counts as no answer."""

# --- multi-agent interaction (what a round does to recorded answers) ---------------------------
SAMPLE_KEEPS_CORRECT = 0.85
"""Re-sampling diversity. The data hold one recorded answer per (model, item), but a second agent
of the same model in one query is a fresh sample (temperature > 0), not a copy. The first agent
of each model in a query (plan slots in order) gives the model's recorded answer, so single-agent
and mixed-model plans stay on the recorded data; the n-th agent of the same model gives fresh
sample n - 1, correct with this probability when the recorded answer is correct and with
probability acc (1 - this) / (1 - acc) when it is wrong, acc being the model's recorded train
accuracy, so every sample keeps the model's accuracy. Majority voting over samples then gains a
few points on multiple-choice knowledge questions, as self-consistency and sampling-and-voting do
(Wang et al., 2023: +3.9-12 points on commonsense and multiple-choice sets against +18 on GSM8K;
Li et al., 2024, "More agents is all you need"): on the 70B stand-in, 3 voting samples gain about
2 points and 5 about 3 (tests/test_data_outcome.py). With 1.0 every sample repeats the recorded
answer and multi-agent plans of one model never pay."""

SAMPLE_REPEATS_WRONG = 0.5
"""A fresh sample that is wrong picks the recorded wrong letter with this probability (errors of
one model correlate), else a uniformly drawn wrong letter."""

P_ADOPT_CORRECT = 0.5
"""A refiner (chain step, critic, debate round >= 2) whose own answer is wrong adopts the upstream
plurality answer when that one is correct with this probability. Self-correction without external
feedback helps little (Huang et al., 2024, "LLMs cannot self-correct reasoning yet"), while
debate with a correct peer helps more (Du et al., 2023): a middle value."""

P_SWITCH_TO_WRONG = 0.15
"""A refiner whose own answer is correct switches to a wrong upstream plurality answer with this
probability (sycophancy towards peers; small)."""

AGGREGATOR_VOTES_ITSELF = True
"""An aggregator returns the plurality of its upstream answers plus its own answer (one vote);
ties go to its own answer, then to the earliest upstream answer. (The recorded majority vote of
the default five models is 55.5 % vs 62.8 % for the best single model: ensembles do not beat the
strongest model for free.)"""

# --- hardware -----------------------------------------------------------------------------------
GPU_MEMORY_BANDWIDTH_TBPS = {
    "A100-40GB": 1.555, "A100-80GB": 2.04, "H100-80GB": 3.35, "H200-141GB": 4.8, "GH200-96GB": 4.0,
}
GPU_MEMORY_GB = {"A100-40GB": 40, "A100-80GB": 80, "H100-80GB": 80, "H200-141GB": 141,
                 "GH200-96GB": 96}
GPU_DENSE_BF16_TFLOPS = {"A100-40GB": 312, "A100-80GB": 312, "H100-80GB": 989, "H200-141GB": 989,
                         "GH200-96GB": 989}
"""Vendor data sheets (SXM parts). A profile measured on one GPU is moved to another by scaling
its memory-bound terms (c0, c_decode, c_kv) by the ratio of aggregate memory bandwidth and its
prefill term by the ratio of aggregate dense compute (tensor parallelism assumed to scale
perfectly). A profile measured for model A is moved to pool model B by the ratio of parameters
(weights-bound and compute terms; active parameters for MoE compute) and of KV bytes per token
(the attention term)."""

GPU_MEMORY_UTILIZATION = 0.90
"""vLLM's default gpu_memory_utilization; KV capacity = util x GPU memory - weights (bf16)."""

ACTIVATION_RESERVE_GB_PER_GPU = 4.0
"""Activation and CUDA-graph memory vLLM keeps outside the KV cache, per GPU."""

# --- policies ----------------------------------------------------------------------------------
TOKEN_BUDGET_QUANTILE = 0.98
"""A policy with ``token_budget`` caps each DeepThink call at this quantile of the model's
recorded answer lengths (train split), not at the serving cap (assumptions.MAX_TOKENS_QUANTILE).
The longest answers are mostly wrong: the 70B's longest 2 % (over 525 tokens) are right 12.6 %
of the time against 62.5 % overall; 16 % of its output tokens lie beyond that length, and
0.4 % of its correct answers. Chosen on the validation split among 0.95 / 0.97 / 0.98 / 0.99
(experiments/token_budget_check.py, docs/learning.md)."""

# --- workload -----------------------------------------------------------------------------------
BUDGET_RANGE_S = (20.0, 90.0)
"""Default latency budget per query: uniform between these seconds. Wide enough that a
multi-agent plan fits at low load, tight enough that queueing under congestion breaks it."""

METRICS_FRESH_IN_TWIN = True
"""In the twin, policies read engine metrics at the instant of the decision (age 0), unless
``inframind bench --metrics-period S`` serves snapshots refreshed every S seconds. The serving
plane pushes snapshots every 250 ms and marks old ones stale."""
