# Thin wrapper over CMake: `make`, `make test`, `make debug`, `make bench`,
# `make install PREFIX=/usr/local`, `make stats`, `make options-doc`.
BUILD ?= build
JOBS  ?= $(shell nproc)
PREFIX ?= /usr/local
GEN   := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all build test install debug debug-test stats stats-test options-doc bench bench-quick bench-instr clean

all: build

$(BUILD)/.configured: CMakeLists.txt
	cmake -S . -B $(BUILD) $(GEN) -DCMAKE_BUILD_TYPE=Release -DHAKMEM_DEBUG=OFF
	@touch $@

build: $(BUILD)/.configured
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# Header, libraries, pkg-config file, CMake package and the `hakmem` launcher.
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# Internal invariant checks on; a separate tree so release objects stay intact.
debug:
	cmake -S . -B build-debug $(GEN) -DCMAKE_BUILD_TYPE=Debug -DHAKMEM_DEBUG=ON -DCMAKE_C_FLAGS_DEBUG="-O1 -g" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g"
	cmake --build build-debug -j $(JOBS)

debug-test: debug
	cd build-debug && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# -DHAKMEM_STATS=ON: the fast paths count every call (per class, per refill
# source) for the statistics report; a separate tree.
stats:
	cmake -S . -B build-stats $(GEN) -DCMAKE_BUILD_TYPE=Release -DHAKMEM_STATS=ON
	cmake --build build-stats -j $(JOBS)

stats-test: stats
	cd build-stats && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# README.md's option table from src/options.def.
options-doc:
	python3 scripts/gen_options_doc.py

bench: build
	python3 scripts/bench.py --build $(BUILD) $(if $(BENCH),--bench $(BENCH)) $(if $(RUNS),--runs $(RUNS))

bench-quick: build
	python3 scripts/bench.py --build $(BUILD) --quick $(if $(BENCH),--bench $(BENCH)) $(if $(RUNS),--runs $(RUNS))

bench-instr: build
	python3 scripts/bench_instr.py --build $(BUILD)

clean:
	rm -rf $(BUILD) build-debug build-stats
