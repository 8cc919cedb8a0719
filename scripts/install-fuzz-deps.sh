#!/usr/bin/env bash
# Installs what `make fuzz` needs and this machine lacks: clang 14, its
# sanitizer runtimes and libFuzzer (Debian packages, with apt-get). Does
# nothing (and needs no network) when all are present. `make test` needs none.
set -euo pipefail

# package:command-or-file that proves it is installed
needs=(
  clang-14:clang-14
  libfuzzer-14-dev:/usr/lib/llvm-14/lib/libFuzzer.a
  # the sanitizer and fuzzer runtimes clang links (--no-install-recommends leaves them out)
  libclang-rt-14-dev:/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a
)

missing=()
for need in "${needs[@]}"; do
  pkg=${need%%:*} probe=${need#*:}
  if [[ $probe == /* ]]; then [[ -e $probe ]] || missing+=("$pkg")
  else command -v "$probe" >/dev/null 2>&1 || missing+=("$pkg"); fi
done

if ((${#missing[@]} > 0)); then
  if [[ $(id -u) -ne 0 ]]; then
    SUDO=sudo
  else
    SUDO=
  fi
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
