# The two commands a newcomer needs: `make demo` and `make test`. Both build .venv themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The demo needs the package alone (no dev extras: no agent frameworks, no browser, no docs tools).
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: screenshots install demo test test-core test-core-quick test-fast lint typecheck docs dist bench bench-peers soak fleet fleet-long fleet-upgrade fleet-upgrade-long fleet-upgrade-long-roll clean services browser

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/saga-worker demo

# The console's browser tests drive Debian's chromium (no browser download is possible): install it
# where it is missing and apt-get can (as root). Without it they skip locally and fail under CI=true.
browser:
	@test -x /usr/bin/chromium || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "no /usr/bin/chromium (apt-get install chromium): the browser tests will skip, or fail under CI=true"

# The whole suite: lint and types first (seconds), then every test against the real services.
test: $(STAMP) browser
	bash .ci/programs
	$(BIN)/ruff check saga_worker tasks config tests bench examples
	$(BIN)/ruff format --check saga_worker tasks config tests bench examples
	$(BIN)/mypy
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	@$(BIN)/python -c 'import platform; print("whole suite on", platform.python_implementation(), platform.python_version())'
	$(BIN)/python -m pytest

# The core suite (no browser, no agent frameworks) on another interpreter, in a venv of its own; CI runs
# it on 3.12 and 3.13 after `make test` (.ci/run):
#   make test-core PYTHON=~/.pyenv/versions/3.12.1/bin/python3.12 VENV=.venv-3.12
CORE_STAMP := $(VENV)/.installed-core
CORE_IGNORE := --ignore=tests/agents --ignore=tests/integration/test_agents_over_celery.py \
	--ignore=tests/console/test_browser.py --ignore=tests/console/test_shared_sessions.py \
	--ignore=tests/tracing/test_picture.py --ignore=tests/django_app/test_admin_browser.py

$(CORE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test-core]'
	# The newest Django the extra admits on this interpreter (6.x on 3.12+, 5.2 on 3.11), even in a venv
	# that had an older one: CI runs 5.2 in the main pass and 6.x here.
	$(BIN)/python -m pip install --quiet --upgrade 'django>=5.2,<7'
	touch $(CORE_STAMP)

test-core: $(CORE_STAMP)
	@$(BIN)/python -c 'import platform; print("core suite on", platform.python_implementation(), platform.python_version())'
	bash .ci/programs
	$(BIN)/python -m pytest $(CORE_IGNORE)

# CI's pass on 3.12 and 3.13 (.ci/run): the core suite's tests not marked slow (the logic, the three
# journals, the console, the CLI, the docs' snippets but those needing a worker) and those marked
# each_python (a real worker on Redis + PostgreSQL, the embedded worker, the wheel installed into a
# fresh venv). The slow fault and worker suites run once, on the main interpreter, in `make test`.
test-core-quick: $(CORE_STAMP)
	@$(BIN)/python -c 'import platform; print("core suite (quick) on", platform.python_implementation(), platform.python_version())'
	bash .ci/programs
	$(BIN)/python -m pytest $(CORE_IGNORE) -m "not slow or each_python"

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not celery"

lint: $(STAMP)
	$(BIN)/ruff check saga_worker tasks config tests bench examples
	$(BIN)/ruff format --check saga_worker tasks config tests bench examples

# mypy --strict on the package and its tests in one run ([tool.mypy] packages); `make test` runs it too.
typecheck: $(STAMP)
	$(BIN)/mypy

# The release: sdist and wheel into dist/, checked (metadata, README rendering) by twine.
dist: $(STAMP)
	rm -rf dist build
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

# The documentation site (docs/, mkdocs.yml) into site/: strict, so a broken link, a missing page or
# an API reference that does not resolve fails the build. `make test` runs it too.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The peers the bench compares with (bench/peers.txt) live in an environment of the bench's own,
# never in the product's dependencies. Without it (no registry reachable) the peers group says skipped.
PEERS := bench/.peers
PEERS_STAMP := $(PEERS)/.installed

$(PEERS_STAMP): bench/peers.txt
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet -r bench/peers.txt \
		&& touch $(PEERS_STAMP) || echo "bench/.peers: could not install bench/peers.txt; the peers group will say skipped"

bench-peers: $(PEERS_STAMP)

# make bench BENCH_ARGS=--quick (or --only floors,inprocess, --rss-unwinds 10000; see bench/README.md)
bench: $(STAMP) $(PEERS_STAMP)
	bash .ci/programs
	$(BIN)/python -m bench $(BENCH_ARGS)

# Regenerate the screenshots the docs show (docs/*.png) from the browser tests: the console's, Flower's, a trace's, the Django admin's.
screenshots: $(STAMP) browser
	SAGA_UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/console/test_browser.py tests/console/test_browser_inbox.py tests/console/test_browser_stuck.py
	SAGA_UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/integration/test_flower.py -k screenshot
	SAGA_UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/tracing/test_picture.py
	SAGA_UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/django_app/test_admin_browser.py

soak: $(STAMP)
	$(BIN)/python -m pytest tests/faults -m soak -p no:randomly -s

# The fleet under faults (tests/fleet, docs/operations/fleet.md): hosts as network namespaces, every
# fault kind landed SAGA_FLEET_REPEATS times while at least SAGA_FLEET_RUNS runs unwind; ends with the
# `fleet:` line. The short tier (~6 minutes) runs in CI; fleet-long is the 1,000-run, 300-fault one.
FLEET_TABLE ?= /tmp/saga-fleet-table.txt
fleet: $(STAMP)
	bash .ci/programs
	SAGA_FLEET_TABLE=$(FLEET_TABLE) $(BIN)/python -m pytest tests/fleet/test_fleet.py -m fleet -p no:randomly -s
	@tail -n 1 $(FLEET_TABLE)

fleet-long: $(STAMP)
	SAGA_FLEET_RUNS=1000 SAGA_FLEET_REPEATS=43 $(MAKE) fleet

# The rolling upgrade under faults (tests/fleet/rolling.py, docs/guides/upgrading.md): the previous
# release's wheel built from its tag into .venv-previous/, its workers and the current code's serving
# one queue while the journal is expanded, the old workers stopped one by one, then the contract step;
# every fault kind landed SAGA_UPGRADE_REPEATS times. Ends with the `upgrade:` line. The short form
# (~3 minutes, with a build whose checker must bite) runs in CI.
UPGRADE_TABLE ?= /tmp/saga-upgrade-table.txt
fleet-upgrade: $(STAMP)
	bash .ci/programs
	SAGA_UPGRADE_TABLE=$(UPGRADE_TABLE) $(BIN)/python -m pytest tests/fleet/test_upgrade.py -m fleet -p no:randomly -s
	@tail -n 1 $(UPGRADE_TABLE)

fleet-upgrade-long: $(STAMP)
	SAGA_UPGRADE_RUNS=600 SAGA_UPGRADE_REPEATS=12 $(MAKE) fleet-upgrade

# The long form with Redis lost only once the previous release's workers are gone, so they serve
# through two thirds of the faults and are stopped in their turn (a Redis loss ends them otherwise).
fleet-upgrade-long-roll: $(STAMP)
	SAGA_UPGRADE_REDIS_AFTER_ROLL=1 $(MAKE) fleet-upgrade-long

services:
	bash .ci/services

clean:
	rm -rf $(VENV) .venv-previous .saga *.egg-info .pytest_cache .mypy_cache build dist site
