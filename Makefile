# shmq — make install | demo | test | typecheck | bench [QUICK=1] | bench-store
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install demo test typecheck bench bench-store clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# the main job: a broker, producers and consumers in separate processes, verified
demo: $(STAMP)
	$(PY) tools/demo.py $(DEMO_ARGS)

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

# mypy over the package, with the settings of [tool.mypy] in pyproject.toml
typecheck: $(STAMP)
	$(PY) -m mypy shmq

# shmq against its peers (installs redis-server/nats-server and the bench extra if missing)
bench: $(STAMP)
	QUICK=$(QUICK) $(PY) -m tools.bench.suite $(BENCH_ARGS)

bench-store: $(STAMP)
	$(PY) tools/bench/store_bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache
