# Two commands: `make demo` (main job) and `make test` (test suite).
# Each creates the local virtual environment .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py --out runs/demo

test: $(STAMP)
	$(PY) -m ruff check setattn tests examples benchmarks
	$(PY) -m pytest -q -n 2 --durations=10

lint: $(STAMP)
	$(PY) -m ruff check setattn tests examples benchmarks

clean:
	rm -rf $(VENV) runs
