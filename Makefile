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
TARGET ?= local
SET ?=
MOEFORGE := PYTHONPATH=$(CURDIR) $(PY) -m compiler
SET_ARGS := $(foreach s,$(SET),--set $(s))
CATALOGUE := $(patsubst recipes/%.yaml,%,$(shell find recipes -name '*.yaml' -not -path 'recipes/platforms/*' -not -path 'recipes/models/*' | sort))

.PHONY: help setup demo test check compile compile-all $(addprefix compile-one/,$(CATALOGUE)) launch matrix fuzz bench golden clean

help: ## show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: a plain `torch` requirement would pull gigabytes of CUDA wheels
	$(PY) -m pip install -q "torch==$(TORCH_VERSION)"
	$(PY) -m pip install -q "megatron-core==$(MCORE_VERSION)" -e ".[dev]"
	touch $@

setup: $(STAMP) ## create .venv with the compiler, the runtime (torch CPU, megatron-core) and test tools

demo: $(STAMP) ## compile the embedded default recipe, train it on 2 CPU ranks, print the summary
	$(MOEFORGE) compile $(RECIPE) $(SET_ARGS)
	PYTHONPATH=$(CURDIR) $(PY) -m compiler.launch --target local build/$(RECIPE)

test: $(STAMP) ## run the test suite
	PYTHONPATH=$(CURDIR) $(PY) -m pytest -q -x --durations=10

check: $(STAMP) ## validate and solve every recipe in recipes/
	$(MOEFORGE) check recipes

compile: $(STAMP) ## compile RECIPE=<id> [SET="key=value ..."] into build/<id>/
	$(MOEFORGE) compile $(RECIPE) $(SET_ARGS)

compile-all: $(addprefix compile-one/,$(CATALOGUE)) ## compile every recipe in the catalogue (make -j works)

compile-one/%: $(STAMP)
	@$(MOEFORGE) compile $*

launch: compile ## launch RECIPE with TARGET=local|slurm|print
	PYTHONPATH=$(CURDIR) $(PY) -m compiler.launch --target $(TARGET) build/$(RECIPE)

matrix: $(STAMP) ## recipes x platforms table (text, and build/matrix.html)
	$(MOEFORGE) matrix --html build/matrix.html

fuzz: $(STAMP) ## the long fuzz run (hypothesis, many examples)
	MOEFORGE_FUZZ=long PYTHONPATH=$(CURDIR) $(PY) -m pytest -q tests/fuzz tests/hostile

bench: $(STAMP) ## benchmarks: check/compile throughput, solver latency, cold start vs megatron-core
	PYTHONPATH=$(CURDIR) $(PY) bench/bench.py

golden: $(STAMP) ## rewrite tests/golden from the catalogue (review the diff before committing!)
	MOEFORGE_UPDATE_GOLDEN=1 PYTHONPATH=$(CURDIR) $(PY) -m pytest -q tests/golden

clean: ## remove build outputs (keeps .venv)
	rm -rf build .pytest_cache
