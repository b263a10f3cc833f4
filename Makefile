# The two commands a user needs: `make run` and `make test`. Both set up .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench bench-store clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/rmqpy broker --storePathRootDir ./data/store

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

ONS := tests/clients/ali_ons
ONS_STAMP := $(ONS)/node_modules/.installed

# ali-ons (a stock RocketMQ client in pure JavaScript) for the real-client tests.
$(ONS_STAMP): $(ONS)/package.json $(ONS)/package-lock.json
	cd $(ONS) && npm ci --no-audit --no-fund --loglevel=error
	touch $(ONS_STAMP)

test: lint $(ONS_STAMP)
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m bench.broker_bench

bench-store: $(STAMP)
	$(BIN)/python -m bench.store_bench

clean:
	rm -rf $(VENV) data .mypy_cache .pytest_cache .ruff_cache
