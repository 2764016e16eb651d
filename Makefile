PYTHON ?= python3

.PHONY: install services test lint format check

install:  ## install cairn and everything its tests and linters need
	$(PYTHON) -m pip install -e ".[dev]"

services:  ## start PostgreSQL and Redis if they are not running
	bash scripts/services.sh

test: services  ## the whole test suite (what CI runs)
	$(PYTHON) -m pytest

lint:  ## ruff (lint + format check) and mypy
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy

format:
	$(PYTHON) -m ruff format .
	$(PYTHON) -m ruff check --fix .

check: lint test
