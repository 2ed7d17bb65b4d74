# The two commands of the README. Both work on a fresh machine with Python 3.11 and Java 17.
PYTHON ?= python3
VENV := .venv
DATA ?= data
HOST ?= 127.0.0.1
PORT ?= 8080
RULES ?= examples/connected-patient/rules

$(VENV)/installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

.PHONY: serve test lint
serve: $(VENV)/installed  ## install, then run the server on an on-disk store in $(DATA), with the example rules
	$(VENV)/bin/concentrator serve --data $(DATA) --host $(HOST) --port $(PORT) --rules $(RULES)

test: $(VENV)/installed  ## install, then run the whole test suite (conformance included)
	$(VENV)/bin/python -m pytest

lint: $(VENV)/installed
	$(VENV)/bin/ruff check concentrator sparql_ext store protocol conformance bench tests examples
