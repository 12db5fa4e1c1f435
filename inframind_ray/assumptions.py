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

# --- the other task families (GSM8K, MATH level 5, HumanEval, MBPP) ----------------------------
# Their recorded data: ZeroEval's zero-shot greedy reasoning-then-answer outputs on GSM8K and MATH
# level 5 (correct or not by ZeroEval's own scorer, and the length in words), and EvalPlus's
# per-task pass@1 of HumanEval+/MBPP+ tasks estimated from 100 samples at temperature 1.0 (and
# the mean length of the correct samples in characters). A DeepThink answer IS the recorded one.

STRATEGY_RETENTION_BY_TASK = {
    "mmlu_pro": STRATEGY_RETENTION,
    "gsm8k": {Strategy.FLASH: 0.40, Strategy.CONCISE: 0.85, Strategy.DEEPTHINK: 1.0},
    "math": {Strategy.FLASH: 0.30, Strategy.CONCISE: 0.75, Strategy.DEEPTHINK: 1.0},
    "humaneval": {Strategy.FLASH: 0.95, Strategy.CONCISE: 0.98, Strategy.DEEPTHINK: 1.0},
    "mbpp": {Strategy.FLASH: 0.95, Strategy.CONCISE: 0.98, Strategy.DEEPTHINK: 1.0},
}
"""Per task family: probability that a recorded-correct answer stays correct under a strategy.
Chain of thought pays most on math: Sprague et al. (2024, "To CoT or not to CoT?") find nearly
all of its gain on math and symbolic reasoning and little elsewhere, and direct answers to GSM8K
lose well over half the accuracy of step-by-step ones (Wei et al., 2022: PaLM-540B 17.9 % direct
vs 56.9 % CoT; instruction-tuned models lose less), so Flash keeps 40 % on GSM8K and 30 % on the
harder MATH level-5 problems, Concise (a short derivation) 85 % and 75 %. Code is written either
way: a Flash answer is the program without explanation and keeps 95 %, Concise 98 %."""

STRATEGY_LENGTH_BY_TASK = {
    "mmlu_pro": STRATEGY_LENGTH,
    "gsm8k": STRATEGY_LENGTH,
    "math": STRATEGY_LENGTH,
    "humaneval": {Strategy.FLASH: (0.60, 24, 512), Strategy.CONCISE: (0.80, 32, 640),
                  Strategy.DEEPTHINK: (1.0, 8, 100_000)},
    "mbpp": {Strategy.FLASH: (0.60, 24, 512), Strategy.CONCISE: (0.80, 32, 640),
             Strategy.DEEPTHINK: (1.0, 8, 100_000)},
}
"""(fraction of the recorded length, min, max) output tokens per family. On GSM8K and MATH a
Flash answer is the final number and Concise a short derivation, as on MMLU-Pro. A code answer
always holds the program: Flash is the program alone (60 % of a DeepThink answer, which adds the
reasoning before it), Concise the program and a few lines."""

CODE_CHARS_PER_TOKEN = 3.2
"""Characters per token of Python source for Llama/Mistral/Qwen BPE tokenisers (indentation and
symbols tokenise worse than prose at ~4 characters per token)."""

CODE_REASONING_TOKENS = 120
"""A DeepThink code answer explains its plan before the program: this many tokens on top of the
program's own (recorded mean length of the model's correct samples, or of every model's on the
task where the model has none)."""

CODE_SAMPLES_INDEPENDENT = True
"""Code outcomes are drawn, not replayed: the recorded pass@1 of a (model, task) is a sampling
rate, so every agent call of that model on the task passes with that probability, independently
(seeded per query, item, model and sample: a query is a new generation). The first agent's draw
plays the role of the recorded answer. Passing programs are the same answer for voting (they
behave alike on the tests); each failing program is a different answer."""

WRONG_ANSWERS_DISTINCT = True
"""On GSM8K, MATH and code, two wrong answers are the same answer only when they come from the
same model's recorded wrong answer (a model repeating itself, SAMPLE_REPEATS_WRONG); wrong answers
of different models, of fresh samples and of a strategy that loses a correct answer differ. The
data hold ZeroEval's extracted answers for 14 GSM8K and 17 MATH models only (not every stand-in),
so agreement between different models' wrong numbers is not replayed: a vote among wrong answers
never forms a wrong majority across models, which favours ensembles slightly (on MMLU-Pro's ten
options, wrong letters of different models do coincide)."""

UNRECORDED_CODE_PASS = "model mean"
"""A code item with no recorded pass@1 (EvalPlus profiled 29 of 164 HumanEval and 89 of 974 MBPP
tasks) passes with the model's mean pass@1 over the recorded train-split tasks of its family.
Workloads draw only recorded items; this covers a served query on any other item."""

ZERO_SHOT_FAMILIES = ("gsm8k", "math", "humaneval", "mbpp")
"""Families whose recorded answers were zero-shot: a DeepThink call carries no worked examples
(few-shot tokens 0), unlike MMLU-Pro's 5-shot chain of thought."""

STAND_INS = "pool file"
"""Where a pool model has no recorded answers for a family, its pool entry names the recorded
model it replays there (``stand_ins: {family: model}``), chosen as the nearest recorded model by
family and size; ``inframind pools`` shows them. The default pool's choices and reasons are
written beside them in pools/default.yaml; every other model's, in pools/catalog.yaml (the models
random training pools and the held-out pools draw from)."""

CARD_DEPENDENCE = 0.5
"""How much a model with a card but no recorded answers (``ModelConfig.card``) follows the recorded
model it re-weights: P(right | recorded wrong) = CARD_DEPENDENCE x its accuracy when it is the
weaker one, P(wrong | recorded right) = CARD_DEPENDENCE x its error rate when it is the stronger
one (the other conditional then gives the card's accuracy). Measured on the shipped records: over
every pair of recorded models, P(weaker right | stronger wrong) / P(weaker right) is 0.52 on
MMLU-Pro (300 pairs), 0.47 on GSM8K (820), 0.46 on MATH (703); by Bayes the same ratio holds for
P(stronger wrong | weaker right) / P(stronger wrong). 1 would be independent answers, 0 nested
ones (every item the weaker model gets right, the stronger gets right too)."""

CARD_OUTCOMES = "recorded model re-weighted to the card"
"""The twin simulates a model that has a card but no recorded answers by replaying a recorded model
(the pool entry's ``recorded``, or its stand-in on a family) and re-drawing right/wrong per item,
seeded per (model, family, item), with the conditionals of ``CARD_DEPENDENCE``, so that its mean
accuracy on a family is the card's and items hard for the recorded model stay hard for it. An
MMLU-Pro answer turned right is the right letter, one turned wrong a seeded wrong letter; its other
wrong answers keep the recorded letters. Code families scale pass@1 by the same rule in
expectation. Lengths, speed and memory stay the recorded model's and the pool entry's profile:
the card's output-length priors are reported, not replayed. Families the card did not measure
replay the recorded answers unchanged."""

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
"""Activation and CUDA-graph memory vLLM keeps outside the KV cache, per GPU (and per engine:
each of several engines sharing a GPU keeps its own)."""

CO_LOCATED_INTERFERENCE = "none"
"""Engines sharing a GPU (pool models naming the same ``gpu_ids``, each with its
``gpu_memory_utilization`` share of the memory) are simulated as if each had the GPU's compute
and memory bandwidth to itself: only their KV capacity follows the share. Real co-located
engines contend for SMs and bandwidth and slow each other's iterations when both are busy, by an
amount that depends on both loads; we have no measurement of it (the profiles are of one engine
per GPU), so the shared-GPU pool's latencies under load are optimistic."""

# --- policies ----------------------------------------------------------------------------------
TOKEN_BUDGET_QUANTILE = 0.98
"""A policy with ``token_budget`` caps each DeepThink call at this quantile of the model's
recorded answer lengths (train split), not at the serving cap (assumptions.MAX_TOKENS_QUANTILE).
The longest answers are mostly wrong: the 70B's longest 2 % (over 525 tokens) are right 12.6 %
of the time against 62.5 % overall; 16 % of its output tokens lie beyond that length, and
0.4 % of its correct answers. Chosen on the validation split among 0.95 / 0.97 / 0.98 / 0.99
(experiments/token_budget_check.py, docs/learning.md)."""

BUDGET_TAIL_MAX_ACCURACY = 0.5
"""A ``"tail"`` token budget (``core.types.TaskCard.budget``) cuts a (model, task family) only
where its train answers longer than the budget are right less often than this: "mostly wrong",
the budget's own premise above. It holds for MMLU-Pro (2-15 % right beyond the budget) and MATH
(0 %) but not for GSM8K, where the 70B's answers beyond its 303 tokens are right 81 % of the
time (docs/learning/journal.md, 2026-12-06)."""

BUDGET_TAIL_MIN_ANSWERS = 5
"""Fewer train answers than this beyond the budget cannot show the tail is mostly wrong: the
serving cap applies (the code families have one such answer per model)."""

# --- workload -----------------------------------------------------------------------------------
BUDGET_RANGE_S = (20.0, 90.0)
"""Default latency budget per query: uniform between these seconds. Wide enough that a
multi-agent plan fits at low load, tight enough that queueing under congestion breaks it."""

METRICS_FRESH_IN_TWIN = True
"""In the twin, policies read engine metrics at the instant of the decision (age 0), unless
``inframind bench --metrics-period S`` serves snapshots refreshed every S seconds. The serving
plane pushes snapshots every 250 ms and marks old ones stale."""

# --- scheduling ---------------------------------------------------------------------------------
# The attained-service queues' levels and anti-starvation (Autellix's mechanisms, our values)
# are read by ``core.request_queue``, which imports nothing above ``core``: they live, with their
# reasons and ``INFRAMIND_*`` overrides, in ``core.constants`` (LAS_FIRST_S, LAS_RATIO,
# LAS_LEVELS, STARVATION_RATIO); docs/scheduling.md lists them.

# --- RL training: per-episode load factors -----------------------------------------------------
LOAD_CAPACITY_PROXY = "decode-bound single-call throughput"
"""A training episode drawn as a load factor (``EnvConfig.load_range``) needs its pool's capacity
at every reset, far too often for the bench's measured capacity (a bisection of twin runs). The
env uses a proxy instead: the queries per minute the pool would finish if every query were one
step-by-step call of the mixed workload's mean length, spread over every replica at full batch
(``max_num_seqs`` sequences, each decode iteration at that batch size, prefill and KV growth
ignored). It overstates what a pool sustains (multi-call topologies, prefill, KV pressure), so
load factors of the training distribution are relative, not the bench's load factors; what it
gives is the same *shape* of draw on a pool with 2 slots or 1024 (learning/pools_draw.py)."""
