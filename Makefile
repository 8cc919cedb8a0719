# The everyday commands. CMake does the building; this only names the tasks.
BUILD      ?= build
TEST_BUILD ?= build-test
JOBS       ?= $(shell nproc)

.PHONY: all release test run bench deps clean

all: release

deps:
	@scripts/install-deps.sh

# Optimised library, bench servers and examples.
release: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DXK_BUILD_BENCHMARKS=ON -DXK_BUILD_EXAMPLES=ON
	cmake --build $(BUILD) --parallel $(JOBS)

# Every unit and integration test, built with AddressSanitizer and UBSan.
test: deps
	cmake -S . -B $(TEST_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXK_ENABLE_SANITIZERS=ON \
	      -DXK_BUILD_BENCHMARKS=ON -DXK_BUILD_EXAMPLES=ON
	cmake --build $(TEST_BUILD) --parallel $(JOBS)
	cd $(TEST_BUILD) && ctest --output-on-failure --timeout 600

# The bench routes on :8080, one worker per available core.
run: release
	./$(BUILD)/bench/http_bench_server 8080

clean:
	rm -rf $(BUILD) $(TEST_BUILD)
