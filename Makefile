# The everyday commands. CMake does the building; this only names the tasks.
BUILD      ?= build
TEST_BUILD ?= build-test
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
JOBS       ?= $(shell nproc)
PREFIX     ?= /usr/local

.PHONY: all release install test check tsan fuzz run bench deps clean arena arena-image arena-image-test \
        check-ngtcp2-1x

all: release

deps:
	@scripts/install-deps.sh

# Optimised library, bench servers and examples.
release: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DXK_BUILD_BENCHMARKS=ON -DXK_BUILD_EXAMPLES=ON
	cmake --build $(BUILD) --parallel $(JOBS)

# The library from make's build: headers, libxkit.so and libxkit.a, pkg-config files and the CMake
# package, into PREFIX (ldconfig runs where that is /usr/local or /usr). It brings the library up to
# date but installs nothing else, and runs no deps: `sudo make install` touches only what it must.
install:
	@test -f $(BUILD)/CMakeCache.txt || { echo "make install: nothing is built in $(BUILD)/; run make first" >&2; exit 1; }
	cmake --build $(BUILD) --parallel $(JOBS) --target xkit_static xkit_shared
	cmake --install $(BUILD) --prefix $(PREFIX)

# The build make test and make check share: everything, with AddressSanitizer and UBSan.
define BUILD_SANITIZED
cmake -S . -B $(TEST_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXK_ENABLE_SANITIZERS=ON \
      -DXK_BUILD_BENCHMARKS=ON -DXK_BUILD_EXAMPLES=ON
cmake --build $(TEST_BUILD) --parallel $(JOBS)
endef

# The threaded paths under ThreadSanitizer, in a build of their own: only what the tests
# labelled tsan use is built, and only they run (tests/CMakeLists.txt names them).
define RUN_TSAN
cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXK_ENABLE_TSAN=ON -DXK_BUILD_BENCHMARKS=ON
cmake --build $(TSAN_BUILD) --parallel $(JOBS) --target tsan_tests
cd $(TSAN_BUILD) && ctest -L '^tsan$$' --output-on-failure --timeout 600
endef

# Every test: unit, integration on both backends, lint, fuzz replays and bench, built with
# AddressSanitizer and UBSan, two at a time but those that load the machine (RUN_SERIAL in the
# tests' CMakeLists); then the tsan tier under ThreadSanitizer.
test: deps
	$(BUILD_SANITIZED)
	cd $(TEST_BUILD) && ctest --parallel 2 --output-on-failure --timeout 600
	$(RUN_TSAN)

# The quick tier for the edit-test loop (under 3 minutes on 2 cores once built): unit, lint,
# fuzz replays and the default backend's integration tests but those labelled slow, two at a time.
check: deps
	$(BUILD_SANITIZED)
	cd $(TEST_BUILD) && ctest -L '^(unit|lint|fuzz|integration)$$' -LE '^(epoll|slow)$$' \
	  --parallel $(JOBS) --output-on-failure --timeout 600

tsan: deps
	$(RUN_TSAN)

# xKit built (Release) and its HTTP/3 tests run against ngtcp2 1.x, Debian bookworm-backports'
# 1.11.0 fetched and unpacked beside the system's 0.12.1 in $(NGTCP2_1X_BUILD)/ (the .debs kept
# there), never installed (scripts/check-ngtcp2-1x.sh). Minutes: not part of make test, whose
# lint.ngtcp2_1x_syntax only compiles the ngtcp2 files against 1.x's headers. ASAN=1: with
# AddressSanitizer and UBSan, as make test builds.
NGTCP2_1X_BUILD ?= build-ngtcp2-1x
check-ngtcp2-1x: deps
	JOBS=$(JOBS) scripts/check-ngtcp2-1x.sh $(if $(ASAN),--asan) $(NGTCP2_1X_BUILD)

# Every libFuzzer harness (tests/fuzz/) for FUZZ_SECONDS each, built with clang in $(FUZZ_BUILD)/;
# what adds coverage is merged into tests/fuzz/corpus/, a crash is left in $(FUZZ_BUILD)/crashes/.
fuzz: deps
	@scripts/install-fuzz-deps.sh
	CC=clang-14 cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXK_BUILD_FUZZERS=ON
	cmake --build $(FUZZ_BUILD) --parallel $(JOBS) --target fuzzers
	scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# The bench routes on :8080, one worker per available core.
run: release
	./$(BUILD)/bench/http_bench_server 8080

# The benchmark suite: installs what it needs (bench/setup.sh), builds xKit in Release with the
# bench servers, runs the quick suite and writes bench/results/ (see bench/README.md).
# ARGS go to `python3 bench/xkbench suite`: make bench ARGS="--full --only h2c --peers go,nginx"
bench:
	@bench/setup.sh $(ARGS)
	@echo "make bench: building xKit (Release, bench servers) in $(BUILD)/"
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DXK_BUILD_BENCHMARKS=ON >/dev/null || \
	  { echo "make bench: configuring xKit failed (CMake's errors are above)" >&2; exit 1; }
	@cmake --build $(BUILD) --parallel $(JOBS) >/dev/null || \
	  { echo "make bench: building xKit failed; see: cmake --build $(BUILD)" >&2; exit 1; }
	@python3 bench/xkbench suite --build-dir $(BUILD) $(ARGS)

# The HttpArena entry (arena/main.c), built in Release and run here on the arena's ports
# (8080 h1+h2c, 8081 TLS http/1.1, 8082 h2c, 8443 TLS h2) with the arena's data from
# ARENA_DATA and an RSA-2048 certificate made once in $(BUILD)/arena/certs; its database is a local
# PostgreSQL with the arena's seed (made once in $(BUILD)/arena/db) and a redis-server, started and
# stopped with it by scripts/arena_db.py (DATABASE_URL set: that database, as it is). Ctrl-C stops it.
ARENA_DATA ?= ../shared/arena/data
ARENA_PORTS ?= 8080,8081,8082,8443
arena: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DXK_BUILD_ARENA=ON
	cmake --build $(BUILD) --parallel $(JOBS) --target xkit-arena
	@mkdir -p $(BUILD)/arena/certs
	@test -s $(BUILD)/arena/certs/server.key || openssl req -x509 -newkey rsa:2048 -nodes -days 365 \
	  -subj /CN=localhost -keyout $(BUILD)/arena/certs/server.key -out $(BUILD)/arena/certs/server.crt 2>/dev/null
	@test -s $(ARENA_DATA)/dataset.json || { echo "make arena: no dataset.json in $(ARENA_DATA) (ARENA_DATA=...)" >&2; exit 1; }
	DATA_DIR=$(ARENA_DATA) CERTS_DIR=$(BUILD)/arena/certs ARENA_PORTS=$(ARENA_PORTS) \
	  python3 scripts/arena_db.py --dir $(BUILD)/arena/db -- ./$(BUILD)/arena/xkit-arena

# The HttpArena entry's image (arena/Dockerfile) built with docker, else podman or buildah, and
# tests/integration/test_arena.py run against it, then each stack's compose file brought up whole
# with podman-compose (or docker compose) and test_arena_gateway.py's checks run against it
# (arena/README.md). Minutes, and an image tool: not part of `make test`. Without Docker Hub, run
# arena/base-image.sh once first.
ARENA_TAG ?= xkit-arena
arena-image:
	arena/build.sh $(ARENA_TAG)

arena-image-test: arena-image
	arena/test-image.sh $(ARENA_TAG)
	arena/test-stacks.sh $(ARENA_TAG)

clean:
	rm -rf $(BUILD) $(TEST_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)
