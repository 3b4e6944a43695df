# Two commands on a fresh machine: `make demo` and `make test`. Setup is idempotent.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.trtforge-setup
PIP    := $(PY) -m pip --disable-pip-version-check -q
YOLO_VENV   := .venv-yolo
YOLO_STAMP  := $(YOLO_VENV)/.trtforge-yolo
YOLO_MODELS := $(YOLO_VENV)/models

.PHONY: setup demo test test-fast test-matrix lint docs coverage clean modelopt-venv yolo-models

setup: $(STAMP) $(YOLO_STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	@# torch first, pinned: the CPU wheel on this disk. An existing torch (CUDA build on a GPU box) is kept.
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install torch==2.13.0
	$(PIP) install -e '.[zoo,dev,serve,docs]'
	@# tritonserver + Python backend + stubs. --no-deps: its numpy<2 pin is for its proxy, which we do
	@# not use; the stub gets NumPy < 2 from its own small venv (next line). See docs/guide-triton.md.
	$(PIP) install --no-deps nvidia-pytriton==0.7.0
	$(PY) -m trtforge.serve.environment $(VENV)/trtforge-serve-stub
	@# Full TensorRT's Python bindings, 10.x and 11.x (~1.3 MB each), DOWNLOADED, never installed: their
	@# tensorrt.so cannot import without libnvinfer (and an installed `tensorrt` that cannot import would
	@# hide TensorRT-RTX from the shim). tests/runtime/test_trt_api_surface.py reads their names.
	$(PIP) download --no-deps -d $(VENV)/tensorrt-bindings "tensorrt-cu12-bindings>=10,<11" "tensorrt-cu13-bindings>=11,<12"
	touch $(STAMP)

#: The ultralytics venv (AGPL: tests, examples and benchmarks only; trtforge/ never imports it) and the YOLO
#: ONNX files it exports into $(YOLO_MODELS) (tests/detect/export_yolo.py says what they hold). ultralytics
#: needs torchvision's metadata, and PyPI's torchvision cannot import beside the CPU torch (it breaks even
#: `import transformers`), so both live in their own venv: ~35 MB, packages --no-deps, torch and the rest
#: seen through a .pth file naming the project venv's site-packages (the same pinned CPU torch; no second
#: torch, and never a CUDA one). The venv's own packages come first on sys.path, the project's after.
yolo-models: $(YOLO_STAMP)

$(YOLO_STAMP): tests/detect/export_yolo.py Makefile | $(STAMP)
	test -x $(YOLO_VENV)/bin/python || python3 -m venv --without-pip $(YOLO_VENV)
	$(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > \
	    "$$($(YOLO_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/trtforge-venv.pth"
	$(PIP) --python $(YOLO_VENV)/bin/python install --no-deps ultralytics==8.4.190 torchvision==0.28.0 ultralytics-thop==2.2.3
	YOLO_CONFIG_DIR=$(CURDIR)/$(YOLO_VENV)/config YOLO_OFFLINE=1 $(YOLO_VENV)/bin/python tests/detect/export_yolo.py $(YOLO_MODELS)
	touch $(YOLO_STAMP)

demo: setup
	$(VENV)/bin/trtforge demo

lint: setup
	$(PY) -m ruff check trtforge tests bench examples docs/hooks.py

# The documentation site into site/; --strict: a broken link, a missing page or an unresolved docstring
# reference fails the build.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

#: Three workers (pytest-xdist) on the 2-core CI machine: each is single-threaded, and the third uses the core a
#: worker leaves idle while it waits (a tritonserver starting, pip installing the wheel, a child process); a module's
#: tests stay in one worker, a matrix row's cells in one (tests/conftest.py). WORKERS=2 and WORKERS=1 pass too.
#: docs/DEVELOPING.md, "The suite's cost", says what each part costs.
WORKERS ?= 3
PYTEST  := $(PY) -m pytest -q -n $(WORKERS) --dist loadgroup

#: What CI runs: the docs site, then everything, slow and serve_load included; the 25 slowest tests are printed.
test: setup lint docs
	$(PYTEST) --durations=25

#: The fast lane while developing (<= 90 s on an idle 2-core machine): every architecture rule and a real
#: TensorRT-RTX build per stage; slow tests and serving under load left out.
test-fast: setup lint
	$(PYTEST) --durations=25 -m "not slow and not serve_load"

#: The command × model matrix alone, with serve on every first file (make test serves twelve: tests/matrix/driver.py,
#: SERVE_ROWS; every other command runs on every architecture in both).
test-matrix: setup
	TRTFORGE_MATRIX=full $(PYTEST) tests/matrix

#: The suite's line coverage of trtforge/ (subprocesses and workers included; docs/DEVELOPING.md, "The suite's cost").
coverage: setup
	rm -rf .coverage-data && mkdir -p .coverage-data
	@# an absolute data file: the CLI processes a test starts run in folders of their own
	COVERAGE_FILE=$(CURDIR)/.coverage-data/coverage $(PY) -m coverage run -m pytest -q -n $(WORKERS) --dist loadgroup
	COVERAGE_FILE=$(CURDIR)/.coverage-data/coverage $(PY) -m coverage combine -q
	COVERAGE_FILE=$(CURDIR)/.coverage-data/coverage $(PY) -m coverage report --format=total

#: NVIDIA Model Optimizer 0.47 for bench/quant_accuracy.py's comparison rows, CPU only (never CUDA torch):
#: `make modelopt-venv [MO_VENV=/tmp/mo_venv] [TORCH_WHEEL=path/to/torch-*+cpu.whl]` (docs/benchmarks.md).
MO_VENV ?= /tmp/mo_venv
modelopt-venv:
	bench/modelopt_venv.sh $(MO_VENV)

clean:
	rm -rf $(VENV) $(YOLO_VENV) trtforge_out .pytest_cache .coverage-data site build dist
