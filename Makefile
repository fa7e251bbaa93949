# Two commands do all set-up on a fresh machine (each installs what it needs):
#   make demo   train FROST on the embedded digits set and run the halting sweep (offline)
#   make test   unit tests, every notebook at smoke size under nbval, papermill smoke runs, and
#               notebook 05 in JupyterLab in headless Chromium (tests/test_browser.py)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# smoke runs write here, never over the committed demo outputs
SMOKE_OUT ?= $(or $(TMPDIR),/tmp)/frost_nb_smoke

.PHONY: install browser demo test notebooks notebooks-smoke fashion-mnist clean-smoke

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[notebooks,test]"
	touch $@

# what tests/test_browser.py drives: Playwright (pip; it never downloads a browser here) and
# Debian's chromium at /usr/bin/chromium (apt-get, as root; about a minute on a clean machine).
# SKIP_BROWSER=1 leaves both out and deselects that test (make test SKIP_BROWSER=1).
browser: $(VENV)/.browser
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "tests/test_browser.py needs /usr/bin/chromium: run 'sudo apt-get install -y chromium'," \
	    "or 'make test SKIP_BROWSER=1' to leave that test out" >&2; exit 1; fi; fi

$(VENV)/.browser: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[browser]"
	touch $@

demo: install
	$(PY) -m frost_nb demo

test: install $(if $(SKIP_BROWSER),,browser)
	rm -rf $(SMOKE_OUT)
	FROST_SMOKE=1 FROST_OUTPUTS=$(SMOKE_OUT) FROST_PROGRESS=0 MPLBACKEND=Agg \
	  $(PY) -m pytest -q tests notebooks --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg \
	  -p no:cacheprovider $(if $(SKIP_BROWSER),-m "not browser")

# execute the notebooks at their default (demo) size in place, as they are committed; trained
# models come from outputs/checkpoints/ or the cache. NB=notebooks/01_training.ipynb for one.
NB ?= $(wildcard notebooks/[0-9]*.ipynb)
notebooks: install
	for nb in $(NB); do \
	  $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace $$nb && \
	  $(PY) -c "import sys; from frost_nb.notebook import strip_execution_metadata as s; s(sys.argv[1])" $$nb \
	  || exit 1; done

# the Fashion-MNIST copy of Debian (root; the loader also finds it in data/ or downloads it)
fashion-mnist:
	apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist
