#!/usr/bin/env bash
# Runs tests/integration/test_arena.py against the arena image (not build/arena/xkit-arena), the
# image started the way the arena starts it: host network, its dataset and certificate mounted
# read-only at /data and /certs, ARENA_PORTS set to four free ports by the test.
#   arena/test-image.sh [TAG [UNITTEST-ARGS...]]     (default tag: xkit-arena; `make arena-image-test`)
# With docker when its daemon answers, else podman; XK_IMAGE_TOOL=docker|podman picks one.
set -euo pipefail
cd "$(dirname "$0")/../tests/integration"
tag=${1:-xkit-arena}
shift || true
tool=${XK_IMAGE_TOOL:-}
if [[ -z $tool ]]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    tool=docker
  else
    tool=podman
  fi
fi
export XK_ARENA_COMMAND="$tool run --rm --network host --security-opt seccomp=unconfined -e ARENA_PORTS
  -v {data}/dataset.json:/data/dataset.json:ro -v {data}/static:/data/static:ro
  -v {certs}/server.crt:/certs/server.crt:ro -v {certs}/server.key:/certs/server.key:ro $tag"
echo "arena/test-image.sh: XK_ARENA_COMMAND=$XK_ARENA_COMMAND" >&2
exec python3 test_arena.py "$@"
