# Two promises: `make demo` runs the main job, `make test` passes the tests, on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
comma := ,
EXTRAS ?= triton,torch,tf,dali,bench,peers,lightning,spark,dev,fuzz
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock native/pyproject.toml $(wildcard native/src/*.rs)
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(NATIVE_SOURCES) | sha1sum | cut -c1-10)-$(subst $(comma),_,$(EXTRAS))

.PHONY: system-packages test-tools venv stack-up test-cluster stack-down stack-status demo test unit lint sweep notebooks lab fuzz mutation results

venv: $(STAMP)

# workbench_native (native/, Rust): the loaders' batch reads; built with cargo through maturin (README, "Why each
# dependency"). Without cargo the loaders read on their slower paths and say how to install it.
$(STAMP): pyproject.toml $(NATIVE_SOURCES)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	if command -v cargo >/dev/null; then $(BIN)/python -m pip install -q ./native; \
	else echo "cargo not found: workbench_native not built, the s3-objects, s3-shards and fs loaders use their slower paths"; fi
	rm -f $(VENV)/.installed-* && touch $@

# Debian packages some tests drive: chromium (the report pages in a real browser), Open MPI (mpirun-launched client
# ranks) and iproute2 (ip for network namespaces, ss for listening sockets). apt needs root; without it, or when apt
# fails, this target fails naming what is missing: a test suite that skips for a missing tool proves nothing.
SYSTEM_PACKAGES := chromium:chromium openmpi-bin:mpirun iproute2:ss
system-packages:
	@missing=""; for pair in $(SYSTEM_PACKAGES); do command -v $${pair#*:} >/dev/null || missing="$$missing $${pair%%:*}"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; } \
			|| { echo "apt-get could not install$$missing: run 'apt-get install -y$$missing' as root"; exit 1; }; \
	else echo "missing Debian packages$$missing: run 'apt-get install -y$$missing' as root"; exit 1; fi

# The tools the suite drives beyond the venv: workbench_native (needs cargo) and Triton's perf_analyzer (unpacked
# into the venv from tritonclient's wheel). Each missing one fails here with the command that installs it.
test-tools: venv system-packages
	@$(BIN)/python -c "import workbench_native" 2>/dev/null \
		|| { echo "workbench_native is not built: install Rust's cargo (https://rustup.rs or apt-get install cargo), then make venv"; exit 1; }
	@$(BIN)/python -c "from workbench.bench.perf_analyzer import find_perf_analyzer; find_perf_analyzer()" 2>/dev/null \
		|| $(BIN)/workbench inference perf-install

stack-up: venv
	$(BIN)/workbench stack up

stack-down:
	-test -x $(BIN)/workbench && $(BIN)/workbench stack down

stack-status: venv
	$(BIN)/workbench stack status

# The main job: real servers, one sample through each, then ingest + a small sweep + its report.
demo: stack-up
	$(BIN)/workbench stack probe
	$(BIN)/workbench sweep notebooks/sweeps/demo.yaml

# Every committed result folder that holds a spec.yaml, remade from it on the current code (hours for all of
# them; `workbench results stale` says which need it). One folder: .venv/bin/workbench results remake FOLDER
results: stack-up test-tools
	$(BIN)/workbench results remake

SWEEP ?= notebooks/sweeps/network.yaml
sweep: stack-up
	$(BIN)/workbench sweep $(SWEEP)

# Executes the notebooks with papermill; executed copies are saved beside their results.
NB_OUT ?= results/runs/notebook-sweep
notebooks: stack-up
	mkdir -p $(NB_OUT)
	$(BIN)/papermill notebooks/01-stack-and-ingest.ipynb $(NB_OUT)/01-stack-and-ingest.ipynb
	$(BIN)/papermill notebooks/02-loader-sweep.ipynb $(NB_OUT)/02-loader-sweep.ipynb -p name notebook-sweep
	$(BIN)/papermill notebooks/03-triton-inference.ipynb $(NB_OUT)/03-triton-inference.ipynb
	$(BIN)/papermill notebooks/04-report.ipynb $(NB_OUT)/04-report.ipynb -p results_dir $(NB_OUT)
	$(BIN)/papermill notebooks/06-train-and-serve.ipynb $(NB_OUT)/06-train-and-serve.ipynb -p results_dir $(NB_OUT)/train-and-serve

# JupyterLab on notebooks/ with this venv's kernel, on 127.0.0.1:LAB_PORT; prints the URL with its token.
LAB_PORT ?= 8888
lab: venv
	$(BIN)/python -m workbench.lab --port $(LAB_PORT)

# Coverage-guided fuzzing (atheris) of every parser of outside input, FUZZ_SECONDS per harness: executions and
# findings per harness; crashing inputs land in fuzz/crashes/, logs in fuzz/logs/. Results: fuzz/README.md.
FUZZ_SECONDS ?= 60
fuzz: venv
	$(BIN)/python -c "import atheris" 2>/dev/null || $(BIN)/python -m pip install -q -e '.[fuzz]'
	$(BIN)/python fuzz/run.py --seconds $(FUZZ_SECONDS)

# Mutation testing (mutmut) of the pure-logic core, each module against the unit tests that cover it, one mutant
# per core at low priority (MUTATION_JOBS=1 on a machine shared with other work): a table of mutants, killed,
# survived, score per module. Each module runs in a temporary copy of the tree; the sources are never mutated.
# Results: tests/mutation/RESULTS.md.
MUTATION_JOBS ?= $(shell nproc)
MUTATION_ARGS ?=
mutation: venv
	$(BIN)/python -c "import mutmut" 2>/dev/null || $(BIN)/python -m pip install -q -e '.[mutation]'
	nice -n 10 $(BIN)/python tests/mutation/run.py --jobs $(MUTATION_JOBS) $(MUTATION_ARGS)

# Everything but the multi-node clusters (each starts servers of its own: about 20 minutes on 2 cores).
test: stack-up test-tools
	$(BIN)/python -m pytest -m "not cluster" --durations=60

test-cluster: stack-up test-tools
	$(BIN)/python -m pytest -m cluster --durations=20

unit: venv test-tools
	$(BIN)/python -m pytest -m "not services and not gpu"

# ruff, the layers and no-import-circle contracts of pyproject.toml ([tool.importlinter]), the notebooks' sync,
# and how many committed results measure older code (report/staleness.py).
lint: venv
	$(BIN)/ruff check workbench tests pipelines notebooks fuzz
	$(BIN)/lint-imports
	$(BIN)/python notebooks/sync.py --check
	@$(BIN)/workbench results stale  # a warning, never a failure: regenerating takes hours
