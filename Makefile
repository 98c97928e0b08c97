# Two commands on a fresh machine:
#   make demo   set up .venv and run the demo (embedded Postgres unless PGQUEUE_DSN is set)
#   make test   set up .venv and run lint, types and the whole test suite on real Postgres
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test venv lint bench docs docs-serve

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

venv: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'

# The demo needs the library alone: no development extras.
demo: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/pgqueue demo

lint: venv
	$(BIN)/ruff check pgqueue cli migrations tests bench examples docs setup.py
	$(BIN)/mypy
	$(BIN)/mypy docs/hooks/reference.py  # the docs' generator (mkdocs loads it by path)

# One process per core (pytest-xdist), each with its own embedded server, a test file at a time
# (module-scoped servers stay in one process). Against PGQUEUE_TEST_DSN, one process: they
# would share its cluster-wide roles, which each one's install creates.
XDIST := $(if $(PGQUEUE_TEST_DSN),,-n auto --dist loadfile)

test: lint
	$(BIN)/python -m pytest -q $(XDIST)

bench: venv
	$(BIN)/python bench/throughput.py

# The documentation site (mkdocs.yml): strict, so a broken link or reference fails the build.
# The suite builds it too (tests/docs/test_site.py) and runs every example it shows.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

docs-serve: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs serve --strict --dev-addr 127.0.0.1:8000
