#!/usr/bin/env bash
# Where xKit's HTTP/3 server spends its CPU under h3load's GET /ping load: perf record on the
# server's pid, reported by shared object (ngtcp2, GnuTLS and nettle, ours, libc, the kernel).
# Usage: bench/profile_h3.sh [BUILD_DIR] [PATH] [h3load options...] (default build, /ping, -c10 -m64).
# Needs perf (Debian: linux-perf) and root or kernel.perf_event_paranoid <= 1 for kernel samples.
set -euo pipefail
build=$(realpath "${1:-build}")
path=${2:-/ping}
shift $(($# > 2 ? 2 : $#))
load=("$@")
((${#load[@]})) || load=(-c10 -m64)
work=$(mktemp -d)
trap 'kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" -days 1 \
  -subj /CN=localhost 2>/dev/null
port=$((20000 + RANDOM % 5000))
taskset -c 1 "$build/bench/https_bench_server" "$port" "$work/cert.pem" "$work/key.pem" --workers 1 \
  >"$work/server.log" 2>&1 &
server=$!
sleep 1
taskset -c 0 "$build/bench/h3load" -t1 "${load[@]}" -D 8 --warm-up-time=1 "https://127.0.0.1:$port$path" \
  >"$work/load.log" &
sleep 2
perf record -q -p "$server" -o "$work/perf.data" -- sleep 5 2>/dev/null
wait %2 || true
grep -E "finished in|requests:" "$work/load.log"
perf report -i "$work/perf.data" --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -15
echo "top symbols:"
perf report -i "$work/perf.data" --sort dso,sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -25
