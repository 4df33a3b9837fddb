# The two commands a newcomer needs: `make book` and `make test`. Both bootstrap .venv first.
# Python 3.11 when present, else the first Python >= 3.10 found (override with PYTHON=...).
PYTHON ?= $(shell for p in python3.11 python3.12 python3.13 python3.10 python3; do \
            command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
            2>/dev/null && { echo $$p; break; }; done)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: setup browser export check lint test test-fast test-deep test-lib test-notebooks test-portable book check-pages bench clean help
.PHONY: gpu-check test-gpu-check-dry test-torch-min

help:
	@echo "make book   - set up .venv, check the export, execute every chapter, build the HTML into _build/html,"
	@echo "              then check every page in headless Chromium (make check-pages)"
	@echo "make test   - set up .venv, check the export, run pytest on tests/ and nbval on every chapter"
	@echo "              (with BOOK_SEED=1 and AVX2 kernels: a second machine beside make book's)"
	@echo "make test-torch-min - the library's tests on the oldest PyTorch pyproject.toml allows, in a second"
	@echo "              venv (.venv-torch-min); its setup downloads about 3.8 GB of CUDA wheels from PyPI"
	@echo "make test-fast - the library's tests without the slow ones (subprocesses, torchrun, torch.compile):"
	@echo "              the inner loop while developing; make test runs them all"
	@echo "make test-portable - nbval on every chapter for more seeds and CPU kernel settings"
	@echo "make export - regenerate transformer_lib/ from the chapters"
	@echo "make lint   - ruff (library, tests, tools, benchmarks, notebooks), mypy (library) and the prose check"
	@echo "make test-deep - the property tests, three runs with fresh seeds and ten times the examples"
	@echo "make bench  - run the benchmarks (ratios against PyTorch's own modules)"
	@echo "make gpu-check - on a CUDA GPU: train, profile and time the base model, and record the output"
	@echo "              in benchmarks/results/gpu_check.txt (make test runs it on the CPU with --dry-run)"

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: no Python >= 3.10 found (set PYTHON=...)"; exit 1; }
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (set PYTHON=...)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (transformer-book)" >/dev/null
	@$(MAKE) --no-print-directory browser
	touch $(STAMP)

# The page check (make check-pages) drives Debian's chromium, and the Chinese and Japanese of chapter 12's
# figures and of the pages need a CJK font (Debian's fonts-noto-cjk). Setup installs both with apt-get when
# they are missing (as root, or through sudo -n); where that is impossible it says so, and chapter 12 or
# the page check later fails with the command to run. Nothing else in the project installs system packages.
browser:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] || sudo -n true 2>/dev/null; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  echo "installing Debian's chromium for the page check (apt-get)"; \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null \
	  || { $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive \
	       apt-get install -y -qq --no-install-recommends chromium >/dev/null; } \
	  || echo "warning: could not install chromium; make check-pages needs it (sudo apt-get install chromium)"; \
	else echo "warning: chromium is missing and apt-get needs root: run 'sudo apt-get install chromium'"; fi
	@if fc-list ':family=Noto Sans CJK JP' 2>/dev/null | grep -q .; then :; \
	elif [ "$$(id -u)" = 0 ] || sudo -n true 2>/dev/null; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo "sudo -n"); \
	  echo "installing Debian's fonts-noto-cjk for the Chinese and Japanese of chapter 12 (apt-get)"; \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends fonts-noto-cjk >/dev/null \
	  || { $$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive \
	       apt-get install -y -qq --no-install-recommends fonts-noto-cjk >/dev/null; } \
	  || echo "warning: could not install fonts-noto-cjk; chapter 12 needs it (sudo apt-get install fonts-noto-cjk)"; \
	else echo "warning: fonts-noto-cjk is missing and apt-get needs root: run 'sudo apt-get install fonts-noto-cjk'"; fi

export: $(STAMP)
	$(BIN)/python tools/export.py

check: $(STAMP)
	$(BIN)/python tools/export.py --check

test-lib: check
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 tests/

# The tests marked slow (pytest -m slow: torchrun, signals sent from another process, python -m, the GPU
# check's dry run, torch.compile) are left out: a few seconds a file instead of minutes. make test runs all.
test-fast: check
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 -m "not slow" tests/

# The floor of pyproject.toml (torch>=X) as a measured fact: a second venv with requirements.txt's pins but
# torch at TORCH_MIN, the package installed into it, and the library's tests run there; not the notebooks,
# which are built and checked on requirements.txt's torch. Older releases fail tests: 2.8.0 torchrun's
# report (it carries one process's error, not each one's), 2.7.1 a model built under torch.device("meta")
# (torch.get_default_device() does not see that context there), 2.6.0 also torch.compile's training step
# and the non-finite loss's message, and 2.5.1 also transformers (5.x needs torch 2.6).
# PyPI's x86_64 Linux torch wheels are CUDA builds
# (about 3.8 GB with the nvidia-* wheels, downloaded at each setup), and importing one maps more than the
# 4 GiB of address space that test_sizes' RLIMIT_AS test allows: that test skips itself on a CUDA build.
TORCH_MIN   ?= 2.9.1
VENV_MIN    := .venv-torch-min
$(VENV_MIN)/.installed-$(TORCH_MIN): requirements.txt pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: no Python >= 3.10 found (set PYTHON=...)"; exit 1; }
	rm -rf $(VENV_MIN)
	$(PYTHON) -m venv $(VENV_MIN)
	$(VENV_MIN)/bin/python -m pip install --quiet --upgrade "pip>=24" "setuptools>=77"
	grep -viE '^torch==' requirements.txt > $(VENV_MIN)/requirements.txt
	$(VENV_MIN)/bin/python -m pip install --quiet -r $(VENV_MIN)/requirements.txt "torch==$(TORCH_MIN)"
	$(VENV_MIN)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

test-torch-min: $(VENV_MIN)/.installed-$(TORCH_MIN)
	$(VENV_MIN)/bin/python -c 'import torch; print("torch", torch.__version__)'
	OMP_NUM_THREADS=1 $(VENV_MIN)/bin/python -m pytest -q -n 2 -p no:cacheprovider tests/

# The chapters under nbval as a second machine would run them: another seed (BOOK_SEED, chapter 0) and other
# CPU kernels (ATen's AVX2 code and MKL's AVX2 path instead of this machine's AVX-512), so that the trained
# models differ from make book's (seed 0, the machine's own kernels). Every check must hold on both.
NOTEBOOK_ENV ?= BOOK_SEED=1 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
NBVAL := OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile --nbval-lax --nbval-current-env \
         -p no:cacheprovider
test-notebooks: check
	$(NOTEBOOK_ENV) $(NBVAL) book/

# More machines: nbval over every chapter once per setting below (3 to 4 minutes each on 2 cores). Run it
# before you stop whenever a chapter changed; PORTABLE='BOOK_SEED=5,ATEN_CPU_CAPABILITY=default' picks others
# (settings separated by spaces, variables inside one setting by commas).
PORTABLE ?= BOOK_SEED=2,ATEN_CPU_CAPABILITY=default,MKL_ENABLE_INSTRUCTIONS=AVX2 \
            BOOK_SEED=3,ATEN_CPU_CAPABILITY=avx512,MKL_ENABLE_INSTRUCTIONS=AVX512 \
            BOOK_SEED=7
test-portable: check
	@for setting in $(PORTABLE); do echo "== nbval on every chapter with $$setting"; \
	  env $$(echo $$setting | tr ',' ' ') $(NBVAL) book/ || { echo "failed with $$setting"; exit 1; }; done

# ruff over the library, tests, tools, benchmarks and notebooks; the notebooks' code (and so the modules
# exported from it) must also fit the book's code column of 88 characters; mypy over transformer_lib;
# tools/check_prose.py: no measured figure typed by hand in the prose.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff check --line-length 88 --select E501 book/*.ipynb transformer_lib
	$(BIN)/mypy
	$(BIN)/python tools/check_prose.py

test: lint test-lib test-notebooks

# The GPU check's code paths on the CPU at tiny sizes, so that the script cannot rot between GPU runs; the
# assertions that need CUDA are skipped and listed at the end of its output. make test runs it through
# tests/test_gpu_check.py (which also checks its --record file); this target shows its output.
test-gpu-check-dry: check
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/gpu_check.py --dry-run

# On a CUDA machine: the base model trained in bf16 and fp16, the fused attention kernels, tokens/s and MFU
# against nn.Transformer, decoding speed and synchronisations, memory, torch.compile; asserts what it can and
# writes its output, with the date and the GPU, to benchmarks/results/gpu_check.txt (commit it: the book's
# introduction points to it).
gpu-check: check
	$(BIN)/python benchmarks/gpu_check.py --record

# The property tests only, three runs with fresh seeds and ten times their usual number of examples each
# (tests/conftest.py): a property that holds only for lucky inputs fails here.
test-deep: check
	@for run in 1 2 3; do echo "== property tests, deep run $$run of 3"; \
	  CI= HYPOTHESIS_DEEP=10 OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -n 2 -m hypothesis -p no:cacheprovider tests/ \
	  || exit 1; done

# Every chapter runs from the top in a fresh kernel, two at a time (tools/execute_book.py, into an
# emptied jupyter-cache), with seed 0 and the machine's own CPU kernels; jupyter-book then reads their
# outputs from the cache.
book: check
	rm -rf _build/html _build/.doctrees _build/.jupyter_cache
	BOOK_SEED=0 OMP_NUM_THREADS=1 $(BIN)/python tools/execute_book.py --jobs 2
	$(BIN)/jupyter-book build . --all -W -n --keep-going
	$(MAKE) --no-print-directory check-pages

# Every built page in headless Chromium (Debian's chromium, installed by make setup), offline:
# fails on maths left raw, a missing image, a dead internal link or anchor, a JavaScript error.
# Screenshots of each chapter's first screen go to _build/screenshots.
check-pages: $(STAMP)
	$(BIN)/python tools/check_pages.py --self-test
	$(BIN)/python tools/check_pages.py _build/html

bench: $(STAMP)
	@for f in $(filter-out benchmarks/common.py benchmarks/gpu_check.py,$(wildcard benchmarks/*.py)); do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf _build .pytest_cache
