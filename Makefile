# The two commands a user needs: `make run` and `make test`. Both set up .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint bench bench-broker bench-store bench-spark spark-example clean

# The compiled core (Cython, from PyPI) is built by pip with the machine's C compiler:
# gcc and the Python headers are installed here when missing.
$(STAMP): pyproject.toml setup.py $(wildcard */*.pyx */*/*.pyx */*.pxd */*/*.pxd)
	command -v gcc >/dev/null || { $(SUDO) apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc; }
	$(PY) -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(sysconfig.get_paths()["include"] + "/Python.h"))' || \
	  { $(SUDO) apt-get update -q && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-dev; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The PySpark pipeline's tests need the `spark` extra and a Java runtime for Spark itself.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SPARK_STAMP := $(VENV)/.spark-installed

$(SPARK_STAMP): $(STAMP)
	command -v java >/dev/null || { $(SUDO) apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless; }
	$(BIN)/python -m pip install --quiet -e '.[dev,spark]'
	touch $(SPARK_STAMP)

# This machine only: the ports answer on 127.0.0.1 (the Docker image listens on every
# interface, as RocketMQ does; `bindAddress` in docs/configuration.md).
run: $(STAMP)
	$(BIN)/rmqpy broker --storePathRootDir ./data/store --bindAddress 127.0.0.1

# The example pipeline of the README, against `make run`'s broker.
TOPIC ?= Orders
spark-example: $(SPARK_STAMP)
	$(BIN)/python -m rmqpy.pipeline.examples.tag_counts --topic $(TOPIC) --to TagCounts \
	  --out data/tag_counts $(if $(FOLLOW),--follow)

lint: $(SPARK_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/hadolint docker/Dockerfile

ONS := tests/clients/ali_ons
ONS_STAMP := $(ONS)/node_modules/.installed

# ali-ons (a stock RocketMQ client in pure JavaScript) for the real-client tests.
$(ONS_STAMP): $(ONS)/package.json $(ONS)/package-lock.json
	cd $(ONS) && npm ci --no-audit --no-fund --loglevel=error
	touch $(ONS_STAMP)

# The whole suite on the compiled core, then the wire's, send, store put/dispatch, golden-bytes,
# crash, consumer (pull, push) and CLI tests again on the pure-Python reference
# (RMQPY_PURE_PYTHON=1), which runs wherever the core could not be built (broker processes the
# tests start inherit the setting).
# The tests' Debian packages: openssl makes their TLS certificates, chromium is the browser the
# web console's tests drive (headless, through Playwright).
TEST_DEBS := openssl chromium

test: lint $(ONS_STAMP)
	for tool in $(TEST_DEBS); do command -v $$tool >/dev/null || missing="$$missing $$tool"; done; \
	if [ -n "$$missing" ]; then $(SUDO) apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; fi
	$(BIN)/python -c 'import rmqpy.config.compiled as c, sys; sys.exit(c.describe() != "compiled core")' \
	  || { echo "the compiled core was not built"; exit 1; }
	$(BIN)/pytest
	RMQPY_PURE_PYTHON=1 $(BIN)/pytest -q tests/remoting tests/property tests/golden tests/broker \
	  tests/store/test_put_get.py tests/store/test_dispatch.py tests/store/test_crash.py \
	  tests/integration/test_crash_window.py tests/sdk/test_pull_consumer.py \
	  tests/sdk/test_push_consumer.py tests/sdk/test_cli.py

# `make bench` compares with Redis Streams and NATS JetStream: their Debian packages and
# redis-py are installed here, never by hand (apt-get through sudo when not root).
PEERS := redis-server redis-benchmark redis-cli nats-server openssl
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP)
	for tool in $(PEERS); do command -v $$tool >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  $(SUDO) apt-get update -q && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    redis-server redis-tools nats-server openssl; \
	fi
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m rmqpy.bench.compare

bench-broker: $(STAMP)
	$(BIN)/python -m rmqpy.bench.broker_bench

bench-store: $(STAMP)
	$(BIN)/python -m rmqpy.bench.store_bench

bench-spark: $(SPARK_STAMP)
	$(BIN)/python -m rmqpy.bench.spark_bench

clean:
	rm -rf $(VENV) data .mypy_cache .pytest_cache .ruff_cache
