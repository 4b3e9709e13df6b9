# The README's two commands: `make demo` and `make test`. Both create .venv if missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv system demo test test-fast test-slow bench-smoke lint clean

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

# two workers, one test file per worker (a file's module fixtures are set up once); most
# tests wait on processes, sockets or Spark's JVM. Everything but the slow selection and the
# benchmarks.
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider --durations=15 -n 2 --dist loadfile
test: venv system
	$(PYTEST) -m "not slow and not bench" --doctest-modules src/stretchflow benchmarks/stretchflow_bench tests

# the slow selection (@pytest.mark.slow; CI runs it after make test): the multi-host Spark
# cluster, the Spark sessions and their logs, the SIGKILL-and-resume cycles, the long
# random-schedule searches
test-slow: venv system
	$(PYTEST) -m "slow and not bench" tests

# every benchmark of `stretchflow bench all --quick` writes its JSON and plot (about 7 min; CI)
bench-smoke: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider -m bench tests

# the same selection as make test, now that make test leaves the slow tests out (kept so
# that habits and scripts calling it still work)
test-fast: test

lint: venv
	$(BIN)/ruff check src benchmarks tests

clean:
	rm -rf $(VENV) build dist src/*.egg-info benchmarks/*.egg-info
