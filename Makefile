# shmq — make install | demo | test | typecheck | spark | bench [QUICK=1] | bench-store | top [TOP_ARGS=...]
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SPARK_STAMP := $(VENV)/.installed-spark

.PHONY: install demo test typecheck spark bench bench-store clean host-tools java top

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# the spark extra (pyspark + pyarrow): the Spark data source, its tests and jobs
$(SPARK_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev,spark]'
	@touch $(SPARK_STAMP)

# the main job: a broker, producers and consumers in separate processes, verified
demo: $(STAMP)
	$(PY) tools/demo.py $(DEMO_ARGS)

test: $(SPARK_STAMP) host-tools java
	$(PY) -m pytest -q $(PYTEST_ARGS)

# the HA host tests (tests/ha) make network namespaces with iproute2's ip and tc, and the
# `shmq top` terminal test runs it in tmux: installed by apt-get when missing and root;
# otherwise those tests skip and say why
host-tools:
	@sh tools/host-tool.sh iproute2 "the HA host tests" ip tc
	@sh tools/host-tool.sh tmux "the shmq top terminal test" tmux

# the monitor of a running broker: make top TOP_ARGS="--name orders --interval 0.5"
top: $(STAMP)
	$(PY) -m shmq top $(TOP_ARGS)

# Spark needs a Java runtime: Debian's openjdk-17-jre-headless, installed by apt-get when java
# is missing and we are root; otherwise the Spark tests skip and say why
java:
	@if [ -z "$${JAVA_HOME:-}" ]; then sh tools/host-tool.sh openjdk-17-jre-headless "the Spark tests" java; fi

# the Spark scan job (spark/scan.py) on a store the demo makes in $(SPARK_DEMO_STORE) (remade each run)
SPARK_DEMO_STORE ?= build/spark-demo-store
SPARK_DEMO_ARGS  ?= --messages 5000
spark: $(SPARK_STAMP) java
	rm -rf $(SPARK_DEMO_STORE)
	$(PY) tools/demo.py --store $(SPARK_DEMO_STORE) $(SPARK_DEMO_ARGS)
	$(PY) spark/scan.py $(SPARK_DEMO_STORE) $(SCAN_ARGS)

# mypy over the package and the Spark jobs, with the settings of [tool.mypy] in pyproject.toml
typecheck: $(STAMP)
	$(PY) -m mypy shmq
	$(PY) -m mypy --strict --follow-imports=silent spark/shmq_jobs

# shmq against its peers (installs redis-server/nats-server and the bench extra if missing)
bench: $(STAMP)
	QUICK=$(QUICK) $(PY) -m tools.bench.suite $(BENCH_ARGS)

bench-store: $(STAMP)
	$(PY) tools/bench/store_bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache
