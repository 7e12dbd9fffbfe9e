# The two commands of the README. Both install what is missing (scripts/install-deps), configure
# and build, then run. PRESET=cpu builds without CUDA; CMAKE_ARGS go to every configure, also
# of an existing build directory (CI passes -DCTFORGE_CUDA=ON so that a machine without nvcc
# fails instead of silently skipping the CUDA code).
PRESET ?= default
CMAKE_ARGS ?=
BUILD_DIR ?= $(if $(filter default,$(PRESET)),build,build-$(PRESET))
JOBS ?= 2

.PHONY: all deps build test test-gpu demo bench clean format asan fuzz

all: build

deps:
	@scripts/install-deps

build: deps
	@if [ ! -f $(BUILD_DIR)/CMakeCache.txt ]; then cmake --preset $(PRESET) $(CMAKE_ARGS); \
	 elif [ -n "$(CMAKE_ARGS)" ]; then cmake -S . -B $(BUILD_DIR) $(CMAKE_ARGS); fi
	cmake --build $(BUILD_DIR) -j$(JOBS)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS)

test-gpu: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -L gpu

demo: build
	scripts/demo $(BUILD_DIR)/apps/ctforge

# AddressSanitizer + UndefinedBehaviorSanitizer build (clang, CUDA off) running the whole CPU
# test suite, and the libFuzzer targets built with it (FUZZ_SECONDS per target).
FUZZ_SECONDS ?= 60
asan: deps
	@if [ ! -f build-asan/CMakeCache.txt ]; then cmake --preset asan; fi
	cmake --build build-asan -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir build-asan --output-on-failure -j$(JOBS) -LE gpu

fuzz: deps
	@if [ ! -f build-asan/CMakeCache.txt ]; then cmake --preset asan; fi
	cmake --build build-asan -j$(JOBS)
	scripts/fuzz $(FUZZ_SECONDS) build-asan

bench: build
	$(BUILD_DIR)/bench/bench_backproject

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp' '*.cuh' '*.cu')

clean:
	rm -rf $(BUILD_DIR) demo-out
