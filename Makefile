# Two commands on a fresh machine:
#   make demo   set up .venv and run the demo (embedded Postgres unless PGQUEUE_DSN is set)
#   make test   set up .venv and run lint, types and the whole test suite on real Postgres
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: demo test venv lint check hooks bench docs docs-serve

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

venv: $(BIN)/python hooks
	$(BIN)/python -m pip install --quiet -e '.[dev]'

# The commit-msg hook (.githooks/): a subject of at most 72 characters (tools/commit_msg.py).
hooks:
	@if git rev-parse --git-dir >/dev/null 2>&1; then git config core.hooksPath .githooks; fi

# The demo needs the library alone: no development extras.
demo: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/pgqueue demo

lint: venv
	$(BIN)/ruff check pgqueue cli migrations tests bench examples docs tools setup.py
	$(BIN)/mypy
	$(BIN)/mypy docs/hooks/reference.py  # the docs' generator (mkdocs loads it by path)

# One process per core (pytest-xdist), each with its own embedded server, a test file at a time
# (module-scoped servers stay in one process). Against PGQUEUE_TEST_DSN, one process: they
# would share its cluster-wide roles, which each one's install creates.
XDIST := $(if $(PGQUEUE_TEST_DSN),,-n auto --dist loadfile)

# Before a commit: lint and types, the layout rules, the generated modules, commit subjects,
# and what the change wrote twice (the duplicates report, where that tool is installed).
check: lint
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit/test_layout.py \
	    tests/unit/test_generated.py tests/unit/test_honest_names.py tests/unit/test_commits.py
	@if command -v duplicates >/dev/null 2>&1; then duplicates --change; \
	else echo "duplicates: not installed here; the report is skipped"; fi

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
