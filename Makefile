# Two commands: `make demo` (main job) and `make test` (test suite); `make docs` builds
# the user guide and the API reference.
# Each creates the local virtual environment .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint docs bench gpu-check clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]'
	touch $(STAMP)

# Main job: train on FreeSolv with the defaults (2 threads), print the test RMSE, predict the
# same CSV and draw each atom's contribution to the prediction of one molecule.
# DEMO_FLAGS adds train flags (the tests run `make demo DEMO_FLAGS="--epochs 2"`).
DEMO := runs/freesolv
DEMO_FLAGS :=
demo: $(STAMP)
	rm -rf $(DEMO)
	$(VENV)/bin/setattn train --data datasets/molecules/freesolv.csv --smiles-column smiles \
		--target-columns expt --split random --seed 0 --num-threads 2 --output-dir $(DEMO) \
		$(DEMO_FLAGS)
	$(VENV)/bin/setattn predict --model $(DEMO) --data datasets/molecules/freesolv.csv \
		--output $(DEMO)/preds.csv
	$(VENV)/bin/setattn explain --model $(DEMO) --smiles 'CN(C)C(=O)c1ccc(cc1)OC' \
		--output $(DEMO)/explain.png
	@$(PY) -c "import json; m = json.load(open('$(DEMO)/metrics.json'))['test']; \
		print(f'FreeSolv test RMSE {m[\"rmse\"]:.3f} kcal/mol (MAE {m[\"mae\"]:.3f}, R2 {m[\"r2\"]:.3f}); files in $(DEMO)/')"

test: $(STAMP)
	$(PY) -m ruff check setattn tests examples benchmarks
	$(PY) -m pytest -q -n 2 --durations=10

# Everything but the tests marked slow (examples, torchrun, SIGKILL, fuzzing the CLI).
test-fast: $(STAMP)
	$(PY) -m ruff check setattn tests examples benchmarks
	$(PY) -m pytest -q -n 2 -m "not slow"

# The user guide (docs/guide/, benchmark tables read from benchmarks/results/*.json) and
# the API reference (docs/reference/, from the docstrings), warnings as errors, built from
# scratch so that no warning hides in an unchanged page.
docs: $(STAMP)
	rm -rf docs/_build
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html
	@echo "User guide and API reference: docs/_build/html/index.html"

# The GPU record (benchmarks/results/gpu.json): correctness of every engine path and the
# GAT layers on the device, their speed against PyG and SDPA there, one molecule training
# and prediction on the device and on the CPU. At most a few minutes on one GPU.
# `make gpu-check DEVICE=cpu GPU_FLAGS="--smoke --out x.json"` runs it on the CPU (tests).
DEVICE := cuda
GPU_FLAGS :=
gpu-check: $(STAMP)
	$(PY) benchmarks/gpu_check.py --device $(DEVICE) $(GPU_FLAGS)

lint: $(STAMP)
	$(PY) -m ruff check setattn tests examples benchmarks

# The cheap benchmarks, each rewriting its record benchmarks/results/<name>.json (about
# 15 minutes on 2 cores; timings depend on the machine's load, which each record notes).
# The molecule, attribution and examples benchmarks take hours: run them by hand
# (each script's docstring gives its command).
bench: $(STAMP)
	$(PY) benchmarks/engine.py --threads 1
	$(PY) benchmarks/layers.py --threads 1 --repeats 20
	$(PY) benchmarks/scaling.py --threads 1
	$(PY) benchmarks/compile.py
	$(PY) benchmarks/predict.py

clean:
	rm -rf $(VENV) runs docs/_build
