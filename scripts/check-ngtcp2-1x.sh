#!/usr/bin/env bash
# check-ngtcp2-1x.sh [--asan] [DIR] — make check-ngtcp2-1x: xKit built and its HTTP/3 tests run
# against ngtcp2 1.x (Debian bookworm-backports' 1.11.0) instead of the system's 0.12.1, which
# stays installed and untouched. In DIR (build-ngtcp2-1x/): the packages fetched and unpacked into
# DIR/root by scripts/fetch-ngtcp2-1x.sh (kept for the next run), a Release build in DIR/xkit
# whose pkg-config finds DIR/root first and whose binaries load DIR/root's libraries (CMake's
# build-tree RUNPATH), then ctest -R 'http3|h3|quic|qpack' in it. The peers (gtlsclient,
# aioquic, chromium) are the system's. JOBS (default: nproc) builds in parallel. --asan: with
# AddressSanitizer and UBSan instead (RelWithDebInfo, in DIR/xkit-asan), as make test builds.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
kind=(xkit -DCMAKE_BUILD_TYPE=Release)
if [[ ${1:-} == --asan ]]; then
  kind=(xkit-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXK_ENABLE_SANITIZERS=ON)
  shift
fi
dir=${1:-$src/build-ngtcp2-1x}
jobs=${JOBS:-$(nproc)}
fail() {
  echo "check-ngtcp2-1x: $*" >&2
  exit 1
}

"$src/scripts/fetch-ngtcp2-1x.sh" "$dir"
dir=$(cd "$dir" && pwd)
build=$dir/${kind[0]}
root=$dir/root
libdir=$root/usr/lib/x86_64-linux-gnu

started=$(date +%s)
PKG_CONFIG_PATH=$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH} \
  cmake -S "$src" -B "$build" "${kind[@]:1}" -DXK_BUILD_BENCHMARKS=ON -DXK_BUILD_EXAMPLES=ON \
  -DXK_NGTCP2_1X_DIR="$dir" >/dev/null || fail "configuring $build failed (CMake's errors are above)"
found=$(sed -n 's/^XK_QUIC_libngtcp2_VERSION:INTERNAL=//p' "$build/CMakeCache.txt")
[[ $found == 1.* ]] || fail "$build found ngtcp2 '$found', not 1.x; remove $build and run this again"
cmake --build "$build" --parallel "$jobs" || fail "building against ngtcp2 $found failed"
built=$(date +%s)
# The server must load 1.x's libraries, not fail over to another copy.
for bin in bench/http_bench_server bench/h3load; do
  loads=$(ldd "$build/$bin") # whole: grep -q leaving early would fail the pipe (pipefail)
  grep -q "libngtcp2.so.16 => $libdir/" <<<"$loads" ||
    fail "$build/$bin does not load libngtcp2.so.16 from $libdir"
done
echo "check-ngtcp2-1x: built against ngtcp2 $found in $((built - started)) s; running the HTTP/3 tests"
status=0
(cd "$build" && ctest -R 'http3|h3|quic|qpack' --output-on-failure --timeout 600) || status=$?
echo "check-ngtcp2-1x: build $((built - started)) s, tests $(($(date +%s) - built)) s against ngtcp2 $found" \
  "($([[ $status == 0 ]] && echo all passed || echo FAILED))"
exit $status
