# Two commands matter: `make run` and `make test`. Everything else is a helper.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run test lint typecheck pytest bench eval eval-mixed clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $@ $(VENV)/.installed

# The development set-up, for `make run` and every `manage.py` command in this folder
# (config/settings.py reads it; variables already set win). Git-ignored; never deployed.
.env:
	printf '%s\n' '# Written by `make run`: development settings for every manage.py command here.' \
	  '# Variables set in the environment win. Production has no .env (see README).' \
	  'DJANGO_DEBUG=1' > $@

run: .env $(VENV)/.installed
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py bootstrap
	$(BIN)/daphne -b $(HOST) -p $(PORT) config.asgi:application

test: $(VENV)/.installed-dev lint typecheck pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check answers config tests

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy answers

# One worker per core (at most four: each runs its own live servers and browser), each on a
# test database of its own; PYTEST_ARGS= runs in one process.
PYTEST_ARGS ?= -n auto --maxprocesses 4
pytest: $(VENV)/.installed-dev
	$(BIN)/pytest $(PYTEST_ARGS)

# Retrieval, citation and support figures on the shipped sets (docs/evaluation.md), in a database of
# its own: both corpora ingested (unchanged documents are skipped), then every set.
EVAL_DATABASE_URL ?= sqlite:///$(CURDIR)/eval-db.sqlite3
eval: export DATABASE_URL = $(EVAL_DATABASE_URL)
eval: export DJANGO_DEBUG = 1
eval: $(VENV)/.installed
	$(BIN)/python manage.py migrate --noinput -v 0
	$(BIN)/python manage.py ingest --python-docs eval/corpora/handbook --no-progress
	$(BIN)/python manage.py evaluate eval/python-docs.dev.jsonl eval/python-docs.test.jsonl \
	  eval/handbook.dev.jsonl eval/handbook.test.jsonl \
	  eval/off-topic.dev.jsonl eval/off-topic.test.jsonl \
	  --answers --support-labels eval/support.jsonl $(EVAL_ARGS)

# The same sets on the demo corpus plus four Debian HTML doc sets (installed when missing),
# side by side with the demo corpus alone: eval/mixed.sh, docs/evaluation.md.
eval-mixed: $(VENV)/.installed
	EVAL_DATABASE_URL=$(EVAL_DATABASE_URL) eval/mixed.sh

bench: $(VENV)/.installed-dev
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
