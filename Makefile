# The two commands of the README. Both install what is missing (scripts/install-deps), configure
# and build, then run. PRESET=cpu builds without CUDA; CMAKE_ARGS go to every configure, also
# of an existing build directory (CI passes -DCTFORGE_CUDA=ON so that a machine without nvcc
# fails instead of silently skipping the CUDA code).
PRESET ?= default
CMAKE_ARGS ?=
BUILD_DIR ?= $(if $(filter default,$(PRESET)),build,build-$(PRESET))
JOBS ?= 2
# Python: a project-local virtual environment with the build and test requirements; the
# package is built by scikit-build-core through this CMake project (build directory
# build-python, reused between runs) and installed into it.
PYTHON ?= python3
VENV ?= .venv
# torch and jax: python/tests/test_torch.py and test_jax.py (ctforge.torch / ctforge.jax). From
# PyPI torch brings its CUDA libraries: about 5 GB in the environment, 85 s to install on a
# fresh cache; jax (CPU) about 380 MB, 7 s. kubernetes-validate: python/tests/test_deploy.py
# checks the manifests in deploy/ offline against the Kubernetes schemas it bundles. zarr and
# s3fs: ctforge.zarr_volumes (.zarr and s3:// volumes); moto[server]: its tests' local S3 server.
PY_REQUIREMENTS = "scikit-build-core>=0.10" "pybind11>=2.10" "numpy>=1.22" pytest nbclient \
  nbformat ipykernel matplotlib scipy "dask>=2023.1" "distributed>=2023.1" "h5py>=3.11" algotom \
  torch jax "kubernetes-validate>=1.33" "zarr>=3" s3fs "moto[server]"
PIP = $(VENV)/bin/pip --disable-pip-version-check -q
# The documentation's own requirements, installed by `make docs` only (not by `make test`).
DOCS_REQUIREMENTS = "sphinx>=7" "myst-parser>=2" "myst-nb>=1" "breathe>=4.35"

.PHONY: all deps build test test-cpp test-python test-gpu demo bench bench-distributed bench-peers \
  bench-recon-cli bench-iterative \
  clean \
  format asan fuzz \
  venv python docs

all: build

deps:
	@scripts/install-deps

build: deps
	@if [ ! -f $(BUILD_DIR)/CMakeCache.txt ]; then cmake --preset $(PRESET) $(CMAKE_ARGS); \
	 elif [ -n "$(CMAKE_ARGS)" ]; then cmake -S . -B $(BUILD_DIR) $(CMAKE_ARGS); fi
	cmake --build $(BUILD_DIR) -j$(JOBS)

test: test-cpp test-python

test-cpp: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

$(VENV)/.ready: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install $(PY_REQUIREMENTS)
	touch $@

venv: deps $(VENV)/.ready

# `import ctforge` in $(VENV) (what `pip install .` does, without build isolation so that the
# build directory is reused).
python: venv
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PIP) install --no-build-isolation --no-deps \
	  -C build-dir=build-python .

# pytest compares the module with the command line built above.
test-python: build python
	CTFORGE_CLI=$(BUILD_DIR)/apps/ctforge $(VENV)/bin/python -m pytest -q python/tests

# The documentation site (docs/, Sphinx + MyST) into build-docs/html/, warnings being errors:
# the CLI reference comes from the binary built above, the Python API from the package in
# $(VENV), the C++ API from the headers through doxygen, and examples/quickstart.ipynb is
# executed once. No network at build time.
$(VENV)/.docs-ready: $(VENV)/.ready Makefile
	$(PIP) install $(DOCS_REQUIREMENTS)
	touch $@

docs: build python $(VENV)/.docs-ready
	CTFORGE_CLI=$(BUILD_DIR)/apps/ctforge $(VENV)/bin/sphinx-build -W --keep-going -q -b html \
	  docs build-docs/html
	@echo "docs: build-docs/html/index.html"

test-gpu: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -L gpu

demo: build
	scripts/demo $(BUILD_DIR)/apps/ctforge

# AddressSanitizer + UndefinedBehaviorSanitizer build (clang, CUDA off) running the whole CPU
# test suite, and the libFuzzer targets built with it (FUZZ_SECONDS per target).
FUZZ_SECONDS ?= 60
# Accuracy studies that take minutes under the sanitizers and run no code of their own: helical
# FBP against SIRT, the longest helical pitch, cone-beam FDK on a cylindrical against a flat
# detector (the other cases of each suite cover their code under the sanitizers).
ASAN_SKIP = ^HelicalFbpVsSirt\.|/long_curved64_p10( |$$)|^Cylindrical\.ConeBeamFdkMatchesFlat$$
asan: deps
	@if [ ! -f build-asan/CMakeCache.txt ]; then cmake --preset asan; fi
	cmake --build build-asan -j$(JOBS)
	scripts/clear-omp-registrations
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir build-asan --output-on-failure -j$(JOBS) -LE gpu -E '$(ASAN_SKIP)'

fuzz: deps
	@if [ ! -f build-asan/CMakeCache.txt ]; then cmake --preset asan; fi
	cmake --build build-asan -j$(JOBS)
	scripts/clear-omp-registrations
	@# the probe children the fuzzers fork leave registrations too: cleared again, whatever the result
	scripts/fuzz $(FUZZ_SECONDS) build-asan; rc=$$?; scripts/clear-omp-registrations; exit $$rc

bench: build
	$(BUILD_DIR)/bench/bench_backproject
	$(BUILD_DIR)/bench/bench_forward

# ctforge against RTK and ASTRA (pinned wheels from PyPI, into the project's .venv) on the same
# problems in one run: bench-out/peers.{json,md} and peers_time.png.
PEERS = "itk-rtk==2.7.0.post1" "astra-toolbox==2.5.0"
bench-peers: build python
	$(PIP) install $(PEERS)
	$(VENV)/bin/python bench/peers/bench_peers.py --out bench-out $(BENCH_ARGS)

# CPU FDK end to end (`ctforge recon` on a file) against its back-projection alone.
bench-recon-cli: build python
	$(VENV)/bin/python bench/bench_recon_cli.py --cli $(BUILD_DIR)/apps/ctforge $(BENCH_ARGS)

# Time per iteration of every iterative algorithm (CPU; CUDA when a device is present).
bench-iterative: build python
	cd bench && ../$(VENV)/bin/python bench_iterative.py --json ../bench-out/iterative.json $(BENCH_ARGS)

# Resumable and distributed FDK: one-shot vs slab-wise, 1/2/3 Dask workers, SIGTERM lost work.
bench-distributed: build python
	$(VENV)/bin/python bench/bench_distributed.py --cli $(BUILD_DIR)/apps/ctforge

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp' '*.cuh' '*.cu')

clean:
	rm -rf $(BUILD_DIR) build-python demo-out build-docs docs/_generated
