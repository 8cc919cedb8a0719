#!/usr/bin/env bash
# Installs what `make fuzz` needs and this machine lacks: clang 14, its
# sanitizer runtimes and libFuzzer (Debian packages, with apt-get). Does
# nothing (and needs no network) when all are present. `make test` needs none.
set -euo pipefail
. "$(dirname "$0")/apt-needs.sh"

# package:command-or-file that proves it is installed
needs=(
  clang-14:clang-14
  libfuzzer-14-dev:/usr/lib/llvm-14/lib/libFuzzer.a
  # the sanitizer and fuzzer runtimes clang links (--no-install-recommends leaves them out)
  libclang-rt-14-dev:/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a
)

install_needs install-fuzz-deps "${needs[@]}"
