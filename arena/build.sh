#!/usr/bin/env bash
# Builds the arena image from the repository root (the Dockerfile needs the whole source tree):
#   arena/build.sh [TAG [BUILD-OPTIONS...]]     (default tag: xkit-arena; `make arena-image`)
# With docker when its daemon answers, else podman, else buildah; XK_IMAGE_TOOL=docker|podman|buildah
# picks one. Without Docker Hub, arena/base-image.sh makes the debian:12 base images first.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-xkit-arena}
shift || true
. arena/image-tool.sh
pick_image_tool arena/build.sh buildah
echo "arena/build.sh: $tool builds $tag" >&2
case $tool in
  docker | podman) exec "$tool" build -f arena/Dockerfile -t "$tag" "$@" . ;;
  buildah) exec buildah bud -f arena/Dockerfile -t "$tag" "$@" . ;;
  *) echo "arena/build.sh: XK_IMAGE_TOOL=$tool: docker, podman or buildah" >&2; exit 1 ;;
esac
