#!/usr/bin/env bash
# Builds the arena image from the repository root (the Dockerfile needs the whole source tree):
#   arena/build.sh [TAG]     (default tag: xkit-arena)
set -euo pipefail
cd "$(dirname "$0")/.."
exec docker build -f arena/Dockerfile -t "${1:-xkit-arena}" .
