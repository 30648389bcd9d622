# Thin wrapper over CMake: `make`, `make test`, `make debug`, `make bench`,
# `make install PREFIX=/usr/local`, `make fast-counters`, `make options-doc`, `make bench-redis`,
# `make secure`, `make tsan`, `make fuzz`, `make bench-checks`, `make soak-test`.
BUILD ?= build
JOBS  ?= $(shell nproc)
PREFIX ?= /usr/local
GEN   := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all build test test-default install debug debug-test fast-counters fast-counters-test stats stats-test options-doc bench bench-quick \
        bench-instr bench-usable bench-redis bench-peers bench-checks clean secure secure-test tsan tsan-test fuzz fuzz-run fuzz-test nochecks soak-test

all: build

$(BUILD)/.configured: CMakeLists.txt
	cmake -S . -B $(BUILD) $(GEN) -DCMAKE_BUILD_TYPE=Release -DHAKMEM_DEBUG=OFF
	@touch $@

build: $(BUILD)/.configured
	cmake --build $(BUILD) -j $(JOBS)

# The whole suite in the default build, the secure build and the
# ThreadSanitizer build, then the libFuzzer harness for FUZZ_CI_SECONDS
# (docs/SECURITY.md; needs clang, which .ci/run installs).
test: test-default secure-test tsan-test fuzz-test

test-default: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE soak $(CTEST_ARGS)

# The 60-second soak (label "soak", left out of `make test`: tests/CMakeLists.txt).
soak-test: build
	cd $(BUILD) && ctest --output-on-failure -L soak $(CTEST_ARGS)

# Secure mode (docs/SECURITY.md): the same libraries and suite in build-secure/.
secure:
	cmake -S . -B build-secure $(GEN) -DCMAKE_BUILD_TYPE=Release -DHAKMEM_SECURE=ON
	cmake --build build-secure -j $(JOBS)

secure-test: secure
	cd build-secure && ctest --output-on-failure -j $(JOBS) -LE soak $(CTEST_ARGS)

# The multi-threaded tests with hakmem built under ThreadSanitizer (gcc).
tsan:
	cmake -S . -B build-tsan $(GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHAKMEM_TSAN=ON
	cmake --build build-tsan -j $(JOBS)

tsan-test: tsan
	cd build-tsan && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# libFuzzer harness (clang): build-fuzz/fuzz_api; `make fuzz-run FUZZ_SECONDS=600`.
FUZZ_SECONDS ?= 60
fuzz:
	cmake -S . -B build-fuzz $(GEN) -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHAKMEM_FUZZ=ON
	cmake --build build-fuzz -j $(JOBS)

fuzz-run: fuzz
	mkdir -p build-fuzz/corpus
	build-fuzz/fuzz_api -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 build-fuzz/corpus

# `make test`'s short run: a fresh corpus each time, a fixed seed; the log
# in build-fuzz/ci.log, printed whole on a finding.
FUZZ_CI_SECONDS ?= 45
fuzz-test: fuzz
	rm -rf build-fuzz/ci-corpus && mkdir -p build-fuzz/ci-corpus
	build-fuzz/fuzz_api -seed=1 -max_total_time=$(FUZZ_CI_SECONDS) -rss_limit_mb=4096 \
	  -print_final_stats=1 build-fuzz/ci-corpus > build-fuzz/ci.log 2>&1 || { cat build-fuzz/ci.log; exit 1; }
	@grep -E '^Done|^stat::(average_exec|new_units)' build-fuzz/ci.log

# The default build without the misuse checks on the fast paths, only to
# measure what they cost (docs/SECURITY.md).
nochecks:
	cmake -S . -B build-nochecks $(GEN) -DCMAKE_BUILD_TYPE=Release -DHAKMEM_NO_CHECKS=ON -DHAKMEM_BUILD_TESTS=OFF
	cmake --build build-nochecks -j $(JOBS)

# Header, libraries, pkg-config file, CMake package and the `hakmem` launcher.
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# A Debian package of what `make install` installs, under /usr with the
# multiarch libdir: $(DEB_BUILD)/hakmem_<version>_<arch>.deb (cmake/package.cmake).
.PHONY: deb clean-deb
DEB_BUILD ?= build-deb
deb:
	cmake -S . -B $(DEB_BUILD) $(GEN) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
	  -DHAKMEM_BUILD_TESTS=OFF -DHAKMEM_BUILD_BENCH=OFF
	cmake --build $(DEB_BUILD) -j $(JOBS)
	cd $(DEB_BUILD) && rm -f hakmem_*.deb && cpack -G DEB
	@ls $(DEB_BUILD)/hakmem_*.deb
clean-deb:
	rm -rf $(DEB_BUILD)
clean: clean-deb

# Internal invariant checks on; a separate tree so release objects stay intact.
debug:
	cmake -S . -B build-debug $(GEN) -DCMAKE_BUILD_TYPE=Debug -DHAKMEM_DEBUG=ON -DCMAKE_C_FLAGS_DEBUG="-O1 -g" -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g"
	cmake --build build-debug -j $(JOBS)

debug-test: debug
	cd build-debug && ctest --output-on-failure -j $(JOBS) -LE soak $(CTEST_ARGS)

# -DHAKMEM_FAST_COUNTERS=ON: the fast paths count every call (per class, per
# refill source) for the statistics report; a separate tree. (`make stats`
# and `make stats-test`: the former names.)
fast-counters:
	cmake -S . -B build-counters $(GEN) -DCMAKE_BUILD_TYPE=Release -DHAKMEM_FAST_COUNTERS=ON
	cmake --build build-counters -j $(JOBS)

fast-counters-test: fast-counters
	cd build-counters && ctest --output-on-failure -j $(JOBS) -LE soak $(CTEST_ARGS)

stats: fast-counters
stats-test: fast-counters-test

# README.md's option table from src/options.def.
options-doc:
	python3 scripts/gen_options_doc.py

bench: build
	python3 scripts/bench.py --build $(BUILD) $(if $(BENCH),--bench $(BENCH)) $(if $(RUNS),--runs $(RUNS))

bench-quick: build
	python3 scripts/bench.py --build $(BUILD) --quick $(if $(BENCH),--bench $(BENCH)) $(if $(RUNS),--runs $(RUNS))

bench-instr: build
	python3 scripts/bench_instr.py --build $(BUILD) --variant floor=$(BUILD)/bench/libfloor_alloc.so \
	  --variant floor_checks=$(BUILD)/bench/libfloor_alloc_checks.so

# malloc_usable_size's cost in instructions (callgrind), and redis-server's
# CPU time under redis-benchmark (needs redis-server and redis-tools), per allocator.
bench-usable: build
	python3 scripts/bench_usable.py --build $(BUILD)

bench-redis: build
	python3 scripts/bench_redis.py --build $(BUILD) $(if $(RUNS),--runs $(RUNS))

# The newest peers (mimalloc 2.x, 3.x, snmalloc) from crates.io into $(BUILD)/peers;
# `make bench` does this by itself when they are missing.
bench-peers:
	python3 scripts/build_peers.py --build $(BUILD) --force

# What the misuse checks and secure mode cost, as time, in one process
# (docs/SECURITY.md, "What the checks cost"); BENCH_CHECKS_ARGS="--seconds 60".
bench-checks: build
	cmake --build $(BUILD) --target bench_checks
	$(BUILD)/bench/bench_checks $(BENCH_CHECKS_ARGS)

clean:
	rm -rf $(BUILD) build-debug build-counters build-stats build-secure build-tsan build-fuzz build-nochecks
