# kiln: the two commands of the README, and a few more.
#   make demo      install missing Debian packages (as root), build, run the seed experiment
#   make test      build and run the test suite (everything but the `slow` label)
#   make test-all  the whole suite, `slow` tests included
#   make bench     the full kiln-bench workload suite (with oneMKL: see `make blas`)
#   make blas      Intel's oneMKL from PyPI into .venv-blas, the BLAS that `make bench` and `make bench-peers`
#                  (and `make demo`, once it is there) give kiln on an Intel CPU (KILN_BLAS); kiln builds and
#                  tests without it
#   make test-asan the suite under AddressSanitizer + UndefinedBehaviorSanitizer (LeakSanitizer included)
#   make test-tsan the suite under ThreadSanitizer
#   make test-cuda the suite built with CUDA (needs the toolkit, not a GPU): without a GPU the
#                  NVRTC and emulated-kernel tests run, and the tests that need one skip
#   make test-cuda-simulated  the CUDA tests against kiln's CUDA simulator (tools/cuda-simulator):
#                  no GPU needed, every one of them runs (needs the toolkit's headers and NVRTC)
#   make bench-peers  kiln-bench, TensorFlow, JAX and PyTorch side by side on the same
#                  inputs and threads (creates .venv-peers from PyPI on first use)

BUILD ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test test-all test-asan test-tsan test-cuda test-cuda-simulated demo bench clean kiln-bench peers-venv \
	bench-peers blas

all: build

deps:
	@scripts/install-deps

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -LE slow

test-all: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# oneMKL for the benchmarks (src/kernels/cpu/blas.h): the user's KILN_BLAS if set, else .venv-blas's oneMKL where
# scripts/blas-venv installed it, else none (kiln finds its BLAS itself: OpenBLAS here).
BLAS_VENV ?= .venv-blas
MKL_LIBRARY = $(abspath $(BLAS_VENV))/lib/libmkl_rt.so.3
WITH_BLAS = KILN_BLAS="$${KILN_BLAS:-$$(test -f $(MKL_LIBRARY) && echo $(MKL_LIBRARY))}"

$(BLAS_VENV)/installed: scripts/blas-venv
	scripts/blas-venv $(BLAS_VENV)

blas: $(BLAS_VENV)/installed

demo: build
	$(WITH_BLAS) $(BUILD)/tools/kiln-bench seed --size 2048 --runs 10

bench: build blas
	$(WITH_BLAS) $(BUILD)/tools/kiln-bench all

# Peers: see bench/peers/__main__.py. BENCH_PEERS_FLAGS takes e.g. --big, --peers jax.
PEERS_VENV ?= .venv-peers
BENCH_THREADS ?= 2
BENCH_RUNS ?= 10
BENCH_OUT ?= $(BUILD)/bench-peers
BENCH_PEERS_FLAGS ?=

kiln-bench: configure
	cmake --build $(BUILD) -j $(JOBS) --target kiln-bench

$(PEERS_VENV)/installed: scripts/bench-peers-venv
	scripts/bench-peers-venv $(PEERS_VENV)

peers-venv: $(PEERS_VENV)/installed

bench-peers: kiln-bench peers-venv blas
	$(WITH_BLAS) $(PEERS_VENV)/bin/python -m bench.peers --kiln-bench $(BUILD)/tools/kiln-bench --out $(BENCH_OUT) \
	  --threads $(BENCH_THREADS) --runs $(BENCH_RUNS) $(BENCH_PEERS_FLAGS)

# Sanitizer builds live in their own build directories.
test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=address $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir build-asan --output-on-failure -j $(JOBS) -LE slow

test-tsan: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_SANITIZE=thread $(CMAKE_FLAGS)
	cmake --build build-tsan -j $(JOBS)
	TSAN_OPTIONS=halt_on_error=1:suppressions=$(CURDIR)/scripts/tsan.supp \
	  ctest --test-dir build-tsan --output-on-failure -j $(JOBS) -LE slow

# CUDA support forced on (AUTO wants a GPU too), in its own build directory.
test-cuda: deps
	cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DKILN_CUDA=ON $(CMAKE_FLAGS)
	cmake --build build-cuda -j $(JOBS)
	ctest --test-dir build-cuda --output-on-failure -j $(JOBS) -LE slow

# The CUDA side on the simulated device: the `cuda` tests, none skipped for want of a GPU.
test-cuda-simulated: deps
	cmake -S . -B build-cuda-simulated -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DKILN_CUDA=SIMULATED $(CMAKE_FLAGS)
	cmake --build build-cuda-simulated -j $(JOBS)
	ctest --test-dir build-cuda-simulated --output-on-failure -j $(JOBS) -L cuda -LE slow

clean:
	rm -rf $(BUILD) build-asan build-tsan build-cuda build-cuda-simulated

# libFuzzer targets for the IR parser, verifier and reference evaluator
# (clang, ASan + UBSan), each run FUZZ_SECONDS from the seed corpus in
# fuzz/corpus/. Needs clang and libclang-rt-14-dev (libFuzzer).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60

.PHONY: fuzz-parser
fuzz-parser:
	@command -v clang++ >/dev/null || { echo "fuzz-parser needs clang: apt-get install -y clang libclang-rt-14-dev"; exit 1; }
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	fuzz/run-fuzzers $(FUZZ_BUILD) $(FUZZ_SECONDS)
