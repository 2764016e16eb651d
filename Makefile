PYTHON ?= python3
# The versions of everything the tests and linters run on, as CI proved them; runtime
# dependencies keep their ranges in pyproject.toml (a library must not pin its users).
LOCK := requirements/dev.lock

.PHONY: install lock services browser test lint format check flower docs

install:  ## install cairn and everything its tests and linters need, at the locked versions
	$(PYTHON) -m pip install -c $(LOCK) -e ".[dev,bench]"

lock:  ## refresh the lock to the newest versions pyproject.toml allows (then run the suite)
	$(PYTHON) -m uv pip compile pyproject.toml --extra dev --extra bench --universal --python-version 3.11 \
		--upgrade --quiet -o $(LOCK)

services:  ## start PostgreSQL and Redis if they are not running
	bash scripts/services.sh

browser:  ## Debian's chromium and chromedriver, for the console's browser tests (tests/browser)
	bash scripts/browser.sh

# Two processes, each taking whole files (their fixtures stay warm); then, alone, the
# tests marked serial: those that restart the services or measure how long things take.
test: services  ## the whole test suite (what CI runs)
	$(PYTHON) -m pytest -n 2 --dist loadfile -m "not serial" --durations=15
	$(PYTHON) -m pytest -m serial

lint:  ## ruff (lint + format check), mypy, the import contracts and the size ceilings
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy
	lint-imports
	$(PYTHON) scripts/ceilings.py

DOCS_OUT ?= build/api

# pdoc over the public surface (cairn and cairn.http); a warning (a name in __all__ that
# does not resolve) is an error, and so is a public name without a docstring or a broken
# link in README.md and docs/*.md.
docs:  ## the API reference from the docstrings, into $(DOCS_OUT)/index.html
	$(PYTHON) -W error scripts/api_reference.py $(DOCS_OUT)
	$(PYTHON) scripts/doc_links.py

FLOWER_PORT ?= 5555
FLOWER_ADDRESS ?= 127.0.0.1

flower:  ## Flower on CAIRN_BROKER_URL at http://$(FLOWER_ADDRESS):$(FLOWER_PORT) (workers: --events)
	@test -n "$$CAIRN_BROKER_URL" || { echo "make flower: set CAIRN_BROKER_URL" >&2; exit 2; }
	@$(PYTHON) -c "import flower" 2>/dev/null || { echo 'make flower: Flower is not installed: pip install -e ".[flower]"' >&2; exit 2; }
	$(PYTHON) -m celery -A cairn.runtime flower --port=$(FLOWER_PORT) --address=$(FLOWER_ADDRESS)

format:
	$(PYTHON) -m ruff format .
	$(PYTHON) -m ruff check --fix .

check: lint test
