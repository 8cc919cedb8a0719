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
. ../../arena/image-tool.sh
pick_image_tool arena/test-image.sh
export XK_ARENA_COMMAND="$tool run --rm --network host --security-opt seccomp=unconfined -e ARENA_PORTS
  -v {data}/dataset.json:/data/dataset.json:ro -v {data}/static:/data/static:ro
  -v {certs}/server.crt:/certs/server.crt:ro -v {certs}/server.key:/certs/server.key:ro $tag"
echo "arena/test-image.sh: XK_ARENA_COMMAND=$XK_ARENA_COMMAND" >&2
exec python3 test_arena.py "$@"
