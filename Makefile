# The README's two commands: `make demo` and `make test`. Both create .venv if missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv system demo test test-fast bench-smoke lint clean

venv: $(STAMP)

# the package, then the dev-only benchmarks package (benchmarks/: stretchflow bench, the doc
# writer), which depends on it
$(STAMP): pyproject.toml benchmarks/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,all]'
	$(BIN)/python -m pip install --quiet -e ./benchmarks
	touch $(STAMP)

# Debian packages the tests start: chromium (browser test), redis-server (Redis Streams); idempotent
system:
	sh tools/install-system.sh

demo: venv
	$(BIN)/stretchflow demo

# two workers, one test file per worker (a file's module fixtures, such as the multi-host
# Spark cluster, are set up once); most tests wait on processes, sockets or Spark's JVM
test: venv system
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not bench" --durations=15 -n 2 --dist loadfile --doctest-modules src/stretchflow benchmarks/stretchflow_bench tests

# every benchmark of `stretchflow bench all --quick` writes its JSON and plot (about 7 min; CI)
bench-smoke: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider -m bench tests

test-fast: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow and not bench" --doctest-modules src/stretchflow benchmarks/stretchflow_bench tests

lint: venv
	$(BIN)/ruff check src benchmarks tests

clean:
	rm -rf $(VENV) build dist src/*.egg-info benchmarks/*.egg-info
