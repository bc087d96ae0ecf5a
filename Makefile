# shmq — make install | demo [BROKERS=N] | test | lint | typecheck | spark | docs | docs-serve | wheel | bench [QUICK=1] | bench-docs | bench-store | top [TOP_ARGS=...]
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SPARK_STAMP := $(VENV)/.installed-spark
DOCS_STAMP  := $(VENV)/.installed-docs
WHEEL_STAMP := $(VENV)/.installed-wheel

.PHONY: install demo test lint typecheck spark docs docs-serve wheel bench bench-docs bench-store clean host-tools java top sanitize

# the compiled paths (shmq/_speedups, built by setup.py) need a C compiler and the Python headers:
# installed by apt-get when missing and root; without them shmq installs pure Python
$(STAMP): pyproject.toml setup.py $(wildcard shmq/_speedups/*.pyx shmq/_speedups/*.pxd shmq/_speedups/*.h)
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	@sh tools/host-tool.sh gcc "the compiled paths" gcc
	@sh tools/host-tool.sh $(notdir $(PYTHON))-dev "the compiled paths" \
	  "$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# an extra of pyproject.toml in the venv ($(VENV)/.installed-spark: the spark extra, pyspark +
# pyarrow, for the Spark data source, its tests and jobs): its requirements only, because
# `pip install -e '.[spark]'` would reinstall shmq and re-run the Cython build for nothing
$(VENV)/.installed-%: $(STAMP)
	$(PY) tools/extras.py $* > $@.txt
	$(PY) -m pip install -q -r $@.txt
	@rm -f $@.txt
	@touch $@

# the documentation site (mkdocs.yml, docs/) into build/site; --strict: a broken link, anchor or
# docstring fails the build. docs-serve: the same site on http://127.0.0.1:8000, rebuilt on edits
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d build/site

docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

# the main job: a broker, producers and consumers in separate processes, verified;
# BROKERS=N (N > 1): on a cluster of a name server and N brokers, with the split they made
demo: $(STAMP)
	$(PY) tools/demo.py $(if $(BROKERS),--brokers $(BROKERS)) $(DEMO_ARGS)

# SHMQ_REQUIRE_EXTENSIONS: the differential tests fail (not skip) if the compiled paths did not build;
# the docs extra: tests/docs build the site; the wheel extra: tests/package builds the wheel when
# dist/ has no current one; --durations: the slowest tests, to keep the whole run in its budget
test: $(SPARK_STAMP) $(DOCS_STAMP) $(WHEEL_STAMP) host-tools java
	SHMQ_REQUIRE_EXTENSIONS=1 $(PY) -m pytest -q --durations=25 $(PYTEST_ARGS)

# the compiled paths built with AddressSanitizer + UBSan in a copy of the tree (build/asan, its own
# venv: the normal build is untouched), then the differential, codec, ring and store tests there
ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
sanitize:
	rm -rf build/asan && mkdir -p build/asan
	git ls-files -z | tar --null -T - -cf - | tar -xf - -C build/asan
	cd build/asan && $(PYTHON) -m venv .venv && .venv/bin/python -m pip install -q --upgrade pip 'setuptools>=77' 'Cython>=3.0' \
	  && .venv/bin/python -m pip install -q -e '.[dev]' \
	  && CFLAGS="$(ASAN_FLAGS)" LDFLAGS="$(ASAN_FLAGS)" .venv/bin/python setup.py -q build_ext --inplace --force
	cd build/asan && LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0 SHMQ_REQUIRE_EXTENSIONS=1 \
	  .venv/bin/python -m pytest -q -p no:cacheprovider tests/speedups tests/codec tests/ring tests/store $(PYTEST_ARGS)

# the HA host tests (tests/ha) make network namespaces with iproute2's ip and tc, and the
# `shmq top` terminal test runs it in tmux: installed by apt-get when missing and root;
# otherwise those tests skip and say why
host-tools:
	@sh tools/host-tool.sh iproute2 "the HA host tests" ip tc
	@sh tools/host-tool.sh tmux "the shmq top terminal test" tmux
	@sh tools/host-tool.sh prometheus "the Prometheus scrape test of shmq exporter" prometheus

# the monitor of a running broker: make top TOP_ARGS="--name orders --interval 0.5";
# of every broker of a name server: make top TOP_ARGS="--namesrv ns1" (or SHMQ_NAMESRV=ns1 make top)
top: $(STAMP)
	$(PY) -m shmq top $(TOP_ARGS)

# Spark needs a Java runtime: Debian's openjdk-17-jre-headless, installed by apt-get when java
# is missing and we are root; otherwise the Spark tests skip and say why
java:
	@if [ -z "$${JAVA_HOME:-}" ]; then sh tools/host-tool.sh openjdk-17-jre-headless "the Spark tests" java; fi

# dist/: the sdist and a manylinux wheel built from it, compiled paths included (tools/build_wheel.py)
wheel: $(WHEEL_STAMP)
	$(PY) tools/build_wheel.py dist

# the Spark scan job (spark/scan.py) on a store the demo makes in $(SPARK_DEMO_STORE) (remade each run)
SPARK_DEMO_STORE ?= build/spark-demo-store
SPARK_DEMO_ARGS  ?= --messages 5000 --bulk-messages 5000
spark: $(SPARK_STAMP) java
	rm -rf $(SPARK_DEMO_STORE)
	$(PY) tools/demo.py --store $(SPARK_DEMO_STORE) $(SPARK_DEMO_ARGS)
	$(PY) spark/scan.py $(SPARK_DEMO_STORE) $(SCAN_ARGS)

# ruff's lint rules and its formatting, as [tool.ruff] in pyproject.toml sets them (the fix: `ruff check --fix`
# then `ruff format`)
lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/ruff format --check

# mypy over the package and the Spark jobs, with the settings of [tool.mypy] in pyproject.toml
typecheck: $(STAMP)
	$(PY) -m mypy shmq
	$(PY) -m mypy --strict --follow-imports=silent spark/shmq_jobs

# shmq against its peers (installs redis-server/nats-server and the bench extra if missing)
bench: $(STAMP)
	QUICK=$(QUICK) $(PY) -m tools.bench.suite $(BENCH_ARGS)

# docs/BENCHMARKS.md from docs/benchmarks/results.json; RESULTS=bench/results/<run>.json publishes
# that run first (copies it there)
bench-docs: $(STAMP)
	$(PY) -m tools.bench.docs_page $(if $(RESULTS),--publish $(RESULTS))

bench-store: $(STAMP)
	$(PY) tools/bench/store_bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
