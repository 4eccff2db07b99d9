# The two commands: `make run` and `make test`. Everything else is a helper for them.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test setup lint bench clean

$(STAMP): requirements.txt sdk/pyproject.toml sdk/requirements-adapters.txt
	@test -x $(PY) || $$(scripts/find-python) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	@touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	@scripts/run

test: $(STAMP)
	@scripts/test

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	@scripts/bench

clean:
	@test ! -x $(PY) || $(PY) scripts/embedded_postgres.py stop var/pgdata
	rm -rf $(VENV) var
