# Thin wrapper over CMake: the two commands of the README, plus the pieces
# `make test` is made of (each usable on its own).
#   make              build build/libfusednorm.{so,a} and build/fusednorm
#   make run          build, then check against the fp64 reference and benchmark
#   make test         build, then every test: ctest; the C tests again under
#                     ASan+UBSan; a libFuzzer run; pytest (installing its needs)
#   make install      install header, libraries, pkg-config file and CMake
#                     package under PREFIX (default /usr/local)
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
FUZZ_SECONDS ?= 60
PYTHON ?= python3

# The sanitizer build uses clang when present (the fuzzer needs it anyway),
# else gcc, whose sanitizers work with its own OpenMP runtime.
SAN_CC ?= $(if $(shell command -v clang 2>/dev/null),clang,gcc)
SAN_CXX ?= $(if $(filter clang,$(SAN_CC)),clang++,g++)
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g
export ASAN_OPTIONS ?= detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1
export UBSAN_OPTIONS ?= halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS ?= suppressions=$(CURDIR)/cmake/lsan-suppressions.txt:print_suppressions=0
# pip: quiet and idempotent; root and "externally managed" interpreters (CI)
# are expected here, not warnings.
export PIP_DISABLE_PIP_VERSION_CHECK = 1
export PIP_ROOT_USER_ACTION = ignore
export PIP_BREAK_SYSTEM_PACKAGES = 1

# cmake's generated makefiles are sub-makes too: keep their noise out.
MAKEFLAGS += --no-print-directory

.PHONY: all build run test test-c sass-tools test-asan fuzz test-python install clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/fusednorm run

# Sub-makes rather than prerequisites: the stages run in this order even
# under make -j. Every stage runs even when an earlier one fails (one CI run
# shows every failure); pytest's summary is the last line unless a stage
# failed, in which case the failed stages are named last and make fails.
test: build
	@failed=""; \
	for stage in test-c test-asan fuzz test-python; do \
	  $(MAKE) --no-print-directory $$stage || failed="$$failed $$stage"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed"; exit 1; fi

test-c: build sass-tools
	@echo "== C tests (ctest, $(BUILD)/)"
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# cuobjdump and nvdisasm for ctest's sass_check where the CUDA toolkit has
# none (it scans the library's device code for a ptxas miscompile): NVIDIA's
# wheels of the toolkit's major version, unpacked under $(BUILD)/sass-tools.
# Only for a CUDA build (the major version CMake built with, from its cache);
# a failed download leaves the test skipped, saying so.
sass-tools: build
	@major=$$(sed -n 's/^FUSEDNORM_CUDA_MAJOR:INTERNAL=//p' $(BUILD)/CMakeCache.txt); \
	if [ -n "$$major" ] && \
	   ! { command -v cuobjdump && command -v nvdisasm; } >/dev/null 2>&1 && \
	   ! ls $(BUILD)/sass-tools/nvidia/*/bin/nvdisasm >/dev/null 2>&1; then \
	  echo "== cuobjdump and nvdisasm $$major.* from PyPI into $(BUILD)/sass-tools (for sass_check)"; \
	  rm -rf $(BUILD)/sass-tools && mkdir -p $(BUILD)/sass-tools/whl && \
	  $(PYTHON) -m pip download -q --no-deps -d $(BUILD)/sass-tools/whl \
	    "nvidia-cuda-cuobjdump==$$major.*" "nvidia-cuda-nvdisasm==$$major.*" && \
	  for w in $(BUILD)/sass-tools/whl/*.whl; do $(PYTHON) -m zipfile -e $$w $(BUILD)/sass-tools || exit 1; done && \
	  chmod +x $(BUILD)/sass-tools/nvidia/*/bin/* || \
	  echo "make: could not fetch cuobjdump/nvdisasm: ctest's sass_check will be skipped"; \
	fi

# The same C tests built with ASan+UBSan, CPU backend only (sanitizers see
# host code). The install test is left out: its consumer is not instrumented.
test-asan:
	@echo "== C tests under ASan+UBSan ($(SAN_CC), $(ASAN_BUILD)/)"
	@mkdir -p $(ASAN_BUILD)
	@test -f $(ASAN_BUILD)/CMakeCache.txt || cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_C_COMPILER=$(SAN_CC) -DCMAKE_CXX_COMPILER=$(SAN_CXX) \
	    -DCMAKE_C_FLAGS="$(SAN_FLAGS)" -DCMAKE_CXX_FLAGS="$(SAN_FLAGS)" \
	    -DCMAKE_EXE_LINKER_FLAGS="$(SAN_FLAGS)" -DCMAKE_SHARED_LINKER_FLAGS="$(SAN_FLAGS)" \
	    -DFUSEDNORM_CUDA=OFF -DFUSEDNORM_BUILD_TOOLS=OFF -DFUSEDNORM_BUILD_TESTS=ON \
	    >$(ASAN_BUILD)/configure.log 2>&1 || { cat $(ASAN_BUILD)/configure.log; rm -f $(ASAN_BUILD)/CMakeCache.txt; exit 1; }
	@cmake --build $(ASAN_BUILD) -j $(JOBS) >$(ASAN_BUILD)/build.log 2>&1 || { tail -n 60 $(ASAN_BUILD)/build.log; exit 1; }
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -E '^install_consumer$$'

# libFuzzer over the public API for FUZZ_SECONDS; new inputs go to
# $(FUZZ_BUILD)/corpus, the seeds in fuzz/corpus stay as they are. A finding
# leaves its input in $(FUZZ_BUILD)/ (replay: ./$(FUZZ_BUILD)/fuzz_api FILE).
fuzz:
	@echo "== libFuzzer, $(FUZZ_SECONDS) s ($(FUZZ_BUILD)/)"
	@if ! command -v clang >/dev/null 2>&1; then echo "clang not found: fuzzer skipped (.ci/run installs it)"; exit 0; fi; \
	mkdir -p $(FUZZ_BUILD)/corpus && \
	{ test -f $(FUZZ_BUILD)/CMakeCache.txt || cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_C_COMPILER=clang -DFUSEDNORM_CUDA=OFF -DFUSEDNORM_BUILD_TOOLS=OFF -DFUSEDNORM_BUILD_TESTS=OFF \
	    -DFUSEDNORM_BUILD_FUZZ=ON >$(FUZZ_BUILD)/configure.log 2>&1 || \
	    { cat $(FUZZ_BUILD)/configure.log; rm -f $(FUZZ_BUILD)/CMakeCache.txt; exit 1; }; } && \
	{ cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_api >$(FUZZ_BUILD)/build.log 2>&1 || \
	    { tail -n 60 $(FUZZ_BUILD)/build.log; exit 1; }; } && \
	if FUZZ_API_STATS=1 OMP_NUM_THREADS=2 ./$(FUZZ_BUILD)/fuzz_api -max_total_time=$(FUZZ_SECONDS) -timeout=20 \
	    -rss_limit_mb=2048 -artifact_prefix=$(FUZZ_BUILD)/ -print_final_stats=1 \
	    $(FUZZ_BUILD)/corpus fuzz/corpus >$(FUZZ_BUILD)/fuzz.log 2>&1; then \
	  grep -E '^Done [0-9]+ runs|^fuzz_api: [0-9]+ valid' $(FUZZ_BUILD)/fuzz.log; echo "fuzz: no findings"; \
	else tail -n 80 $(FUZZ_BUILD)/fuzz.log; echo "fuzz: FAILED (log: $(FUZZ_BUILD)/fuzz.log)"; exit 1; fi

test-python: build
	@echo "== Python tests"
	@if [ -f python/requirements-test.txt ]; then \
	  $(PYTHON) -m pip install -q -r python/requirements-test.txt; \
	else echo "python/requirements-test.txt not found: Python test requirements not installed"; fi
	@if [ -d tests/python ]; then PYTHONPATH=python $(PYTHON) -m pytest tests/python -q; \
	else echo "tests/python not found: no Python tests run"; fi

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX),)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
