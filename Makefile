# The set-up commands of the README: `make demo`, `make test` and `make test-containers`.
# Each creates .venv and installs what it needs on first use; later runs reuse it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test test-containers lint bench clean-venv

# The editable install, and a plain path entry to this tree beside it, which type checkers
# follow: they do not run an editable install's import hook, and saw every type as Any.
$(STAMP): pyproject.toml setup.py globalstore/follow/_native.c globalstore/shaping/_json_check.h globalstore/shaping/_fields.c globalstore/storage/_entries.c globalstore/storage/_history_walk.c globalstore/storage/_ordered.c
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Python 3.11+ is needed (found $$($(PYTHON) --version))"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[spark,dev]'
	$(BIN)/python -c 'import pathlib, site; pathlib.Path(site.getsitepackages()[0], "globalstore-tree.pth").write_text("$(CURDIR)\n")'
	rm -f $(VENV)/.installed-*
	touch $@

demo: $(STAMP)
	$(BIN)/globalstore demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -p no:cacheprovider

# Docker for real: an engine (compose/engine.sh installs and starts one as root on Debian),
# the images built here (compose/images.sh), the integration tests that use the session's
# broker with that broker from testcontainers and nowhere else (those that start a broker of
# their own ran in `make test`), then the compose stacks' own tests. The pipelines' tests
# are not run again on the container: the stacks run the Spark job against container brokers.
CONTAINER_TESTS := env -u GLOBALSTORE_TEST_BOOTSTRAP GLOBALSTORE_TEST_BROKER=container \
	GLOBALSTORE_TEST_KAFKA_IMAGE=globalstore/kafka:4.1.1 $(BIN)/python -m pytest -p no:cacheprovider

test-containers: $(STAMP)
	compose/engine.sh ensure
	compose/images.sh
	$(CONTAINER_TESTS) -m session_broker --durations=5 tests/integration
	$(CONTAINER_TESTS) --durations=5 tests/containers

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_store.py
	$(BIN)/python benchmarks/bench_pipeline.py
	$(BIN)/python benchmarks/bench_serve.py

clean-venv:
	rm -rf $(VENV)
