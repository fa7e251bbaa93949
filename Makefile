# Two commands do all set-up on a fresh machine (each installs what it needs):
#   make demo   train FROST on the embedded digits set and run the halting sweep (offline)
#   make test   unit tests, every notebook at smoke size under nbval, papermill smoke runs
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# smoke runs write here, never over the committed demo outputs
SMOKE_OUT ?= $(or $(TMPDIR),/tmp)/frost_nb_smoke

.PHONY: install demo test notebooks notebooks-smoke fashion-mnist clean-smoke

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[notebooks,test]"
	touch $@

demo: install
	$(PY) -m frost_nb demo

test: install
	rm -rf $(SMOKE_OUT)
	FROST_SMOKE=1 FROST_OUTPUTS=$(SMOKE_OUT) FROST_PROGRESS=0 MPLBACKEND=Agg \
	  $(PY) -m pytest -q tests notebooks --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg \
	  -p no:cacheprovider

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
