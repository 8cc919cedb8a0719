#!/usr/bin/env bash
# Installs, with apt-get, whatever building and testing xKit needs and this
# machine lacks. Does nothing (and needs no network) when all is present.
set -euo pipefail

# package:command-or-file that proves it is installed
needs=(
  cmake:cmake
  gcc:gcc
  make:make
  pkg-config:pkg-config
  python3:python3
  curl:curl
  wrk:wrk
  ca-certificates:/etc/ssl/certs/ca-certificates.crt
)

missing=()
for need in "${needs[@]}"; do
  pkg=${need%%:*} probe=${need#*:}
  if [[ $probe == /* ]]; then [[ -e $probe ]] || missing+=("$pkg")
  else command -v "$probe" >/dev/null 2>&1 || missing+=("$pkg"); fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  SUDO=sudo
else
  SUDO=
fi
echo "installing: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
