# Two commands do all set-up on a fresh machine (each installs what it needs):
#   make demo   get the data the committed notebooks use (make data), then train FROST on the
#               embedded digits set (a load: its run is committed) and run the halting sweep
#   make test   unit tests, every notebook at smoke size under nbval, papermill smoke runs, and
#               notebook 05 in JupyterLab in headless Chromium (tests/test_browser.py); every
#               real data set hidden, downloads off; fails if it changed any file git tracks.
#               GitHub Actions runs it too (.github/workflows/ci.yml, SKIP_BROWSER=1), a workflow
#               that tests/test_ci.py checks here with actionlint (the test extra installs it)
# and a third thing people do:
#   make lab    JupyterLab on notebooks/ with the project's environment
PYTHON ?= python3
# The environment: .venv, made here and kept in step with pyproject.toml. VENV=/path/to/env names
# one of your own instead (a virtualenv, a conda environment, the one you ran pip install -e . in):
# when it exists it is used as it is, never made again over it, and the project is installed into
# it (pip install -e ".[notebooks,test]", the browser extra when it lacks Playwright) only when it
# cannot import frost_nb; one that imports another checkout's frost_nb is refused, never
# reinstalled. A VENV that names no environment yet is made there, as .venv would be.
VENV ?= .venv
PY := $(VENV)/bin/python
OWN_ENV := $(if $(filter-out file,$(origin VENV)),$(wildcard $(VENV)/bin/python))
# smoke runs write here, never over the committed demo outputs
SMOKE_OUT ?= $(or $(TMPDIR),/tmp)/frost_nb_smoke

# every real data set is out of sight in tests: the top-level conftest.py points the data root
# and Debian's data folder at an empty folder and switches downloads off (FROST_OFFLINE), for
# make test and a bare pytest run alike, so a machine that happens to have Fashion-MNIST cannot
# hide a test that needs it
LAB_ARGS ?=

.PHONY: install browser browser-deps data demo test lab notebooks fashion-mnist

ifeq ($(OWN_ENV),)
install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[notebooks,test]"
	touch $@

BROWSER_DEPS := $(VENV)/.browser
$(VENV)/.browser: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[browser]"
	touch $@
else
# VENV=: an existing environment, used as it is (-I: the import is not found in this folder)
install:
	@where=$$($(PY) -I -c "import frost_nb, os; print(os.path.dirname(os.path.dirname(os.path.realpath(frost_nb.__file__))))" 2>/dev/null); \
	if [ -z "$$where" ]; then echo "VENV=$(VENV) lacks frost_nb: installing this checkout into it"; \
	  $(PY) -m pip install -q -e ".[notebooks,test]"; \
	elif [ "$$where" != "$$(realpath .)" ]; then \
	  echo "VENV=$(VENV) imports frost_nb from $$where, not from this checkout ($$(realpath .)): use another" \
	    "environment, or install this checkout into it yourself ($(PY) -m pip install -e .)" >&2; exit 1; fi

BROWSER_DEPS := browser-deps
browser-deps: install
	@$(PY) -I -c "import playwright" 2>/dev/null || $(PY) -m pip install -q -e ".[browser]"
endif

# what tests/test_browser.py drives: Playwright (pip; it never downloads a browser here) and
# Debian's chromium at /usr/bin/chromium (apt-get, as root; about a minute on a clean machine).
# SKIP_BROWSER=1 leaves both out and deselects that test (make test SKIP_BROWSER=1).
browser: $(BROWSER_DEPS)
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "tests/test_browser.py needs /usr/bin/chromium: run 'sudo apt-get install -y chromium'," \
	    "or 'make test SKIP_BROWSER=1' to leave that test out" >&2; exit 1; fi; fi

# the data the committed notebooks use, each set prepared once into data/prepared/NAME/ (python -m
# frost_nb.data.prepare; data/README.md): Fashion-MNIST from Debian's package (apt-get as root), else
# torchvision's download; CIFAR-10, CIFAR-100 and ETT (ETTh1, ETTh2: read as they are, checked against
# SHA256SUMS) from the shared copies, linked as sources (data/cifar10 -> ../shared/data/cifar10) when
# they sit beside the checkout. The links are read
# only: the prepared files go to data/prepared/, never through them. A CIFAR set with no local copy
# is left to its first use, which downloads and prepares it (load_dataset's download=True).
# Never fails the demo (which needs only the bundled digits): a step that cannot run says so.
data: install
	@if [ -f /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz ] || [ -d data/fashion-mnist ] \
	  || [ -f data/prepared/fashion-mnist/test.npz ]; then \
	  echo "data: Fashion-MNIST present"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist \
	  || echo "data: apt-get could not install dataset-fashion-mnist: trying torchvision's download" >&2; \
	fi
	@$(PY) -m frost_nb.data.prepare fashion-mnist \
	  || echo "data: Fashion-MNIST not prepared (no root for apt-get, download failed): notebooks 02-06 need it" >&2
	@for name in cifar10 cifar100 ett; do \
	  if [ -d ../shared/data/$$name ] && [ ! -e data/$$name ]; then \
	    ln -s ../../shared/data/$$name data/$$name && echo "data: linked data/$$name -> ../shared/data/$$name"; fi; \
	done
	@$(PY) -m frost_nb.data.prepare --no-download cifar10 cifar100 \
	  || echo "data: a CIFAR set has no local copy (above): its first use downloads and prepares it" >&2

demo: install data
	$(PY) -m frost_nb demo

test: install $(if $(SKIP_BROWSER),,browser)
	rm -rf $(SMOKE_OUT) && mkdir -p $(SMOKE_OUT)
	git status --porcelain --untracked-files=all > $(SMOKE_OUT)/git_status_before 2>/dev/null || true
	FROST_SMOKE=1 FROST_OUTPUTS=$(SMOKE_OUT) FROST_PROGRESS=0 MPLBACKEND=Agg \
	  $(PY) -m pytest -q tests notebooks --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg \
	  -p no:cacheprovider $(if $(SKIP_BROWSER),-m "not browser")
	@git status --porcelain --untracked-files=all > $(SMOKE_OUT)/git_status_after 2>/dev/null || true
	@diff $(SMOKE_OUT)/git_status_before $(SMOKE_OUT)/git_status_after \
	  || { echo "make test changed the working tree (lines above): tests must write only to temporary folders" >&2; exit 1; }

# JupyterLab on the notebooks with the project's environment (LAB_ARGS="--no-browser --port 8899")
# (as root, e.g. in a container, JupyterLab needs --allow-root: added then)
lab: install
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# execute the notebooks at their default (demo) size in place, as they are committed; trained
# models come from outputs/runs/ or the local store (outputs/cache/). NB=notebooks/01_training.ipynb for one.
NB ?= $(wildcard notebooks/[0-9]*.ipynb)
notebooks: install
	for nb in $(NB); do \
	  $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace $$nb && \
	  $(PY) -c "import sys; from frost_nb.notebook.glue import strip_execution_metadata as s; s(sys.argv[1])" $$nb \
	  || exit 1; done

# the Fashion-MNIST copy of Debian alone (root; make data also tries torchvision's download)
fashion-mnist:
	apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist
