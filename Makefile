# moeforge: every target sets itself up when needed.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0
MCORE_VERSION ?= 0.16.1
RECIPE ?= tiny-moe/cpu
# make test's pytest-xdist workers (tests that share an expensive fixture stay on one: tests/conftest.py),
# then the tests marked serial alone (they measure where time goes on this machine's CPUs); bench/suite_time.py
# measures the suite
TEST_WORKERS ?= 2
TARGET ?= local
SET ?=
# compile and launch: the build root (default build/ under the project root); launch runs OUT/RECIPE
OUT ?=
BUILD_DIR = $(or $(OUT),build)/$(RECIPE)
MOEFORGE := $(PY) -m moeforge.compiler
SET_ARGS := $(foreach s,$(SET),--set $(s))
# Second environment for the fidelity judges (tests/fidelity): Megatron-LM's own parse_args /
# validate_args (megatron-core 0.19.2 ships megatron/training) and Megatron-Bridge 0.6.2, which
# needs Python 3.12. Found as python3.12 on PATH, else under pyenv; empty when absent.
VENV312 ?= .venv312
PY312_BIN := $(VENV312)/bin/python
STAMP312 := $(VENV312)/.installed
MCORE312_VERSION ?= 0.19.2
BRIDGE_VERSION ?= 0.6.2
PYTHON312 ?= $(shell for p in $$(command -v python3.12) $$(ls -d $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12 2>/dev/null | sort -V -r); do "$$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && { echo "$$p"; break; }; done)
# megatron-bridge is installed with --no-deps: its full requirement list pulls transformer-engine,
# flashinfer, mlflow, wandb, ... Below are ONLY the packages that importing
# megatron.bridge.{recipes,training.config,training.utils.omegaconf_utils} needs (found by trying,
# versions that work with torch 2.13.0 / megatron-core 0.19.2 on CPU), plus the judges' pyyaml and
# the runtime's jsonschema (it reads plan.json through schemas/plan.v1.json):
#   transformers     models/* (HF config classes for every bridge)   hydra-core, omegaconf  overrides
#   einops, rich     models/*, training/*                             datasets, megatron-energon  data/builders
#   tensorboard      training/utils (torch.utils.tensorboard)         diffusers  diffusion/ bridges
#   nvidia-modelopt  training/checkpointing (--no-deps: its torch/CUDA extras are not needed), pulp for it
# Never transformer-engine: it breaks `import megatron.core` without CUDA.
BRIDGE_DEPS := transformers==5.12.1 hydra-core==1.3.8 omegaconf==2.3.1 einops==0.8.2 rich==15.0.0 \
	datasets==5.2.0 megatron-energon==7.4.1 tensorboard==2.21.0 diffusers==0.42.1 pulp==4.2.0 \
	pyyaml==6.0.3 packaging jsonschema==4.26.0
# The megatron-core releases whose sources tests/rules/test_messages_in_sources.py reads and no venv
# installs (0.16.1 is .venv's, 0.19.2 .venv312's): wheels pinned by name and sha256 in WHEEL_SUMS,
# downloaded into a cache this Makefile owns (gitignored). x86_64 CPython 3.12 wheels whatever the
# machine: only their Python sources are read, and the checksums stay the same everywhere.
MEGATRON_WHEELS ?= .cache/megatron-wheels
WHEEL_SUMS := tests/rules/megatron-wheels.sha256
MEGATRON_WHEEL_VERSIONS := $(shell awk '!/^\#/ && NF == 2 {split($$2, a, "-"); print a[2]}' $(WHEEL_SUMS))
CATALOGUE := $(patsubst recipes/%.yaml,%,$(shell find recipes -name '*.yaml' -not -path 'recipes/platforms/*' -not -path 'recipes/models/*' -not -path 'recipes/sweeps/*' | sort))

.PHONY: help setup setup312 megatron-wheels demo test check compile compile-all launch plan-layout validate-layouts matrix fuzz bench golden schemas clean

help: ## show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: a plain `torch` requirement would pull gigabytes of CUDA wheels
	$(PY) -m pip install -q "torch==$(TORCH_VERSION)"
	$(PY) -m pip install -q "megatron-core==$(MCORE_VERSION)" -e ".[dev]"
	touch $@

setup: $(STAMP) ## create .venv with the compiler, the runtime (torch CPU, megatron-core) and test tools

$(STAMP312):
	@test -n "$(PYTHON312)" || { echo "error: Python 3.12 not found (python3.12 on PATH or \$$(pyenv root)/versions/3.12*)"; exit 1; }
	$(PYTHON312) -m venv $(VENV312)
	$(PY312_BIN) -m pip install -q --upgrade pip
	# torch first, pinned (nothing below may pull another torch); then megatron-core 0.19.2
	$(PY312_BIN) -m pip install -q "torch==$(TORCH_VERSION)"
	$(PY312_BIN) -m pip install -q "torch==$(TORCH_VERSION)" "megatron-core==$(MCORE312_VERSION)"
	$(PY312_BIN) -m pip install -q --no-deps "megatron-bridge==$(BRIDGE_VERSION)" "nvidia-modelopt==0.47.0"
	$(PY312_BIN) -m pip install -q "torch==$(TORCH_VERSION)" $(BRIDGE_DEPS)
	# moeforge itself (its runtime is what the jobs run), editable: the code is this checkout
	$(PY312_BIN) -m pip install -q --no-deps -e .
	@! $(PY312_BIN) -m pip show -q transformer-engine 2>/dev/null || { echo "error: transformer-engine got installed"; exit 1; }
	touch $@

setup312: $(STAMP312) ## create .venv312 (Python 3.12, megatron-core 0.19.2, megatron-bridge) for tests/fidelity

# make test builds .venv312 when Python 3.12 exists; otherwise it says so loudly and the fidelity
# tests skip (their skip reason names this target).
ifneq ($(PYTHON312),)
FIDELITY_ENV := $(STAMP312)
else
FIDELITY_ENV := no-python312
endif

.PHONY: no-python312
no-python312:
	@echo "################################################################################"
	@echo "# WARNING: Python 3.12 not found: .venv312 is NOT built and the fidelity tests  #"
	@echo "# (Megatron-LM / Megatron-Bridge accept every recipe) are SKIPPED.              #"
	@echo "# Install Python 3.12 (python3.12 on PATH or pyenv) and run make setup312.      #"
	@echo "################################################################################"

demo: $(STAMP) ## compile the embedded default recipe, train it on 2 CPU ranks, print the summary
	$(MOEFORGE) compile $(RECIPE) $(SET_ARGS)
	$(MOEFORGE) launch --target local build/$(RECIPE)

$(MEGATRON_WHEELS)/.verified: $(WHEEL_SUMS) | $(STAMP)
	mkdir -p $(MEGATRON_WHEELS)
	for v in $(MEGATRON_WHEEL_VERSIONS); do \
		$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
			--abi cp312 --platform manylinux_2_28_x86_64 -d $(MEGATRON_WHEELS) "megatron-core==$$v" || exit 1; \
	done
	grep -v '^#' $(WHEEL_SUMS) | (cd $(MEGATRON_WHEELS) && sha256sum --check --strict --quiet)
	touch $@

megatron-wheels: $(MEGATRON_WHEELS)/.verified ## cache the pinned megatron-core wheels the source-literal tests read

test: $(STAMP) $(FIDELITY_ENV) $(MEGATRON_WHEELS)/.verified ## run the test suite
	$(PY) -m pytest -q -x -n $(TEST_WORKERS) --dist loadgroup -m "not serial" --durations=15
	$(PY) -m pytest -q -x -m serial --durations=5

check: $(STAMP) ## validate and solve every recipe in recipes/
	$(MOEFORGE) check recipes

compile: $(STAMP) ## compile RECIPE=<id> [SET="key=value ..."] [OUT=<dir>] into build/<id>/ (OUT/<id>/)
	$(MOEFORGE) compile $(RECIPE) $(if $(OUT),--out $(OUT)) $(SET_ARGS)

compile-all: $(addprefix compile-one/,$(CATALOGUE)) ## compile every recipe in the catalogue (make -j works)

compile-one/%: $(STAMP)
	@$(MOEFORGE) compile $*

# A plan for megatron-core >= 0.17 runs with .venv312's python (megatron/training for moeforge.runtime.megatron):
# launch builds .venv312 first when the compiled plan needs it (never for TARGET=print, which only
# prints the exact commands).
launch: compile ## launch RECIPE with TARGET=local|slurm|print (print: the exact commands, nothing run)
	@if [[ "$(TARGET)" != print && "$$($(MOEFORGE) launch --needs-venv312 $(BUILD_DIR))" == yes ]]; then \
		$(MAKE) --no-print-directory setup312; \
	fi
	@$(MOEFORGE) launch --target $(TARGET) $(BUILD_DIR)

plan-layout: $(STAMP) ## rank layouts: MODEL=<model> PLATFORM=<platform> GPUS=<n> [SEQ=] [GBS=]
	$(MOEFORGE) plan-layout $(MODEL) --platform $(PLATFORM) --gpus $(GPUS) $(if $(SEQ),--seq $(SEQ)) $(if $(GBS),--gbs $(GBS))

validate-layouts: $(STAMP) ## plan-layout vs the tuned Megatron-Bridge layouts; rewrites README's validation table
	$(PY) -m moeforge.compiler.planner.validation tests/data/bridge_tuned_layouts.json --update-readme

matrix: $(STAMP) ## recipes x platforms table (text, and build/matrix.html)
	$(MOEFORGE) matrix --html build/matrix.html

fuzz: $(STAMP) ## the long fuzz run (hypothesis, many examples)
	MOEFORGE_FUZZ=long $(PY) -m pytest -q tests/fuzz tests/hostile

bench: $(STAMP) ## benchmarks (check/compile throughput, solver latency, cold start vs megatron-core, plan-layout); rewrites README's table
	$(PY) bench/bench.py --update-readme
	$(PY) bench/plan_layout_bench.py

golden: $(STAMP) ## rewrite tests/golden from the catalogue (review the diff before committing!)
	MOEFORGE_UPDATE_GOLDEN=1 $(PY) -m pytest -q tests/golden

schemas: $(STAMP) ## regenerate schemas/recipe.v3.json and model.v1.json from the knob table (compiler/knobs/*_schema.py)
	$(PY) -m moeforge.compiler.knobs.recipe_schema
	$(PY) -m moeforge.compiler.knobs.model_schema

clean: ## remove build outputs (keeps .venv)
	rm -rf build .pytest_cache
