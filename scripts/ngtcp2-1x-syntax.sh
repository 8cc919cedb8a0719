#!/usr/bin/env bash
# ngtcp2-1x-syntax.sh ROOT CC FLAGS... — the ctest lint.ngtcp2_1x_syntax: every file of xKit that
# includes ngtcp2 (src/xnet/quic/ and what includes its headers, bench/h3load.c) compiled with
# -fsyntax-only and FLAGS (the project's warnings, -Werror) against ngtcp2 1.x's headers in
# ROOT/usr/include, unpacked there by scripts/fetch-ngtcp2-1x.sh (scripts/install-deps.sh runs it).
# The 1.x side of src/xnet/quic/ngtcp2_compat.h is otherwise never compiled here, where Debian 12
# has 0.12.1. Seconds; make check-ngtcp2-1x builds and tests the whole against 1.x.
# No headers in ROOT is a failure, not a skip.
set -euo pipefail

root=${1:?usage: ngtcp2-1x-syntax.sh ROOT CC FLAGS...}
cc=${2:?usage: ngtcp2-1x-syntax.sh ROOT CC FLAGS...}
shift 2
src=$(cd "$(dirname "$0")/.." && pwd)
include=$root/usr/include

if [[ ! -s $include/ngtcp2/ngtcp2.h || ! -s $include/ngtcp2/ngtcp2_crypto_gnutls.h ]]; then
  echo "ngtcp2-1x-syntax: no ngtcp2 1.x headers in $include; run scripts/install-deps.sh" \
    "(or scripts/fetch-ngtcp2-1x.sh ${root%/root})" >&2
  exit 1
fi

flags=(-fsyntax-only -std=gnu11 -I"$include" -I"$src/include" -I"$src/src" "$@")
# The headers found must be 1.x's, not the system's 0.x behind them.
if ! echo '#include <ngtcp2/ngtcp2.h>
#if NGTCP2_VERSION_NUM < 0x010000
#error ngtcp2 0.x
#endif' | "$cc" "${flags[@]}" -x c -; then
  echo "ngtcp2-1x-syntax: <ngtcp2/ngtcp2.h> is not 1.x's with these flags" >&2
  exit 1
fi

cd "$src"
mapfile -t files < <(grep -rlE '#\s*include\s*[<"](ngtcp2/|xnet/quic/)' src bench --include='*.c' | sort)
((${#files[@]} > 0)) || {
  echo "ngtcp2-1x-syntax: no file includes ngtcp2?" >&2
  exit 1
}
failed=0
for f in "${files[@]}"; do
  if "$cc" "${flags[@]}" "$f"; then echo "ok   $f"; else
    echo "FAIL $f"
    failed=1
  fi
done
echo "ngtcp2-1x-syntax: ${#files[@]} files against $(sed -n 's/^#define NGTCP2_VERSION "\(.*\)"/ngtcp2 \1/p' \
  "$include/ngtcp2/version.h")"
exit $failed
