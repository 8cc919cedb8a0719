#!/usr/bin/env bash
# Brings each of the arena's stacks (compose.gateway.yml, compose.gateway-h3.yml and
# compose.production-stack.yml) up whole from the image with podman-compose (or docker compose)
# and runs tests/integration/test_arena_gateway.py's checks against it, on the compose files' own
# host ports: 8080, 8443, 9090 and 6379 must be free. The test starts a PostgreSQL of its own (the
# arena brings one) and prints what it had to adapt to this machine.
#   arena/test-stacks.sh [TAG [UNITTEST-ARGS...]]     (default tag: xkit-arena; `make arena-image-test`)
# The cache's image, redis:7-alpine, comes from Docker Hub; where that cannot be reached, Debian's
# redis-server on the debian:12-slim base (arena/base-image.sh) stands in for it, and says so.
# Debian 12's podman-compose (1.0.3) cannot start a `network_mode: host` service (it adds the
# project's own network, which podman refuses beside host) and drops `cpuset`, so with podman the
# stacks come up with podman-compose from PyPI (PODMAN_COMPOSE_VERSION), in a virtual environment
# of its own (XK_COMPOSE_VENV); XK_PODMAN_COMPOSE names another podman-compose to use instead.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-xkit-arena}
shift || true
. arena/image-tool.sh
pick_image_tool arena/test-stacks.sh
PODMAN_COMPOSE_VERSION=1.6.0
case $tool in
  docker) compose=(docker compose) ;;
  podman)
    compose=("${XK_PODMAN_COMPOSE:-}")
    if [[ -z ${compose[0]} ]]; then
      venv=${XK_COMPOSE_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/xkit/podman-compose-$PODMAN_COMPOSE_VERSION}
      if [[ ! -x $venv/bin/podman-compose ]]; then
        echo "arena/test-stacks.sh: podman-compose $PODMAN_COMPOSE_VERSION from PyPI into $venv" >&2
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q "podman-compose==$PODMAN_COMPOSE_VERSION"
      fi
      compose=("$venv/bin/podman-compose")
    fi
    ;;
esac
command -v "${compose[0]}" >/dev/null || { echo "arena/test-stacks.sh: apt-get install podman-compose" >&2; exit 1; }
"${compose[@]}" version >/dev/null 2>&1 || { echo "arena/test-stacks.sh: ${compose[*]} does not run" >&2; exit 1; }

redis=redis:7-alpine
if ! "$tool" image inspect "$redis" >/dev/null 2>&1 && ! "$tool" pull -q "$redis" >/dev/null 2>&1; then
  redis=xkit-arena-redis
  echo "arena/test-stacks.sh: $tool cannot pull redis:7-alpine; $redis (Debian's redis-server) stands in" >&2
  printf '%s\n' 'FROM debian:12-slim' \
    'RUN apt-get update && apt-get install -y --no-install-recommends redis-server && rm -rf /var/lib/apt/lists/*' |
    "$tool" build -q -t "$redis" -f - arena >/dev/null
fi
export XK_ARENA_STACKS="${compose[*]}" XK_ARENA_IMAGE=$tag XK_ARENA_REDIS_IMAGE=$redis
echo "arena/test-stacks.sh: XK_ARENA_STACKS=$XK_ARENA_STACKS XK_ARENA_IMAGE=$tag XK_ARENA_REDIS_IMAGE=$redis" >&2
cd tests/integration
exec python3 test_arena_gateway.py "$@"
