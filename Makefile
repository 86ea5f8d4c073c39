# kiln: the two commands of the README, and a few more.
#   make demo      install missing Debian packages (as root), build, run the seed experiment
#   make test      build and run the test suite (everything but the `slow` label)
#   make test-all  the whole suite, `slow` tests included
#   make bench     the full kiln-bench workload suite

BUILD ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test test-all demo bench clean

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

demo: build
	$(BUILD)/tools/kiln-bench seed --size 2048 --runs 10

bench: build
	$(BUILD)/tools/kiln-bench all

clean:
	rm -rf $(BUILD)
