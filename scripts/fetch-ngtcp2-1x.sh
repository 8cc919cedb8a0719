#!/usr/bin/env bash
# fetch-ngtcp2-1x.sh DIR — ngtcp2 1.x beside the system's 0.x, never installed: Debian
# bookworm-backports' four ngtcp2 1.11.0 packages (the library, its GnuTLS crypto helpers, and
# their headers) downloaded into DIR/debs (checked against the hashes below), unpacked with
# dpkg -x into DIR/root, and their pkg-config files pointed at DIR/root/usr. A build then finds
# them with PKG_CONFIG_PATH=DIR/root/usr/lib/x86_64-linux-gnu/pkgconfig. Nothing is fetched when
# DIR already holds them. Used by scripts/install-deps.sh (for the lint.ngtcp2_1x_syntax test) and
# scripts/check-ngtcp2-1x.sh (make check-ngtcp2-1x). Any failure: one line on stderr, exit 1.
set -euo pipefail

dir=${1:?usage: fetch-ngtcp2-1x.sh DIR}
version=1.11.0-1~bpo12+1
pool=${NGTCP2_1X_MIRROR:-http://deb.debian.org/debian}/pool/main/n/ngtcp2
# package -> sha256 of its .deb (Debian's bookworm-backports, amd64)
declare -A sha256=(
  [libngtcp2-16]=52a2696b7afa1ee09044d88bbd2d8cfd63cfac7c19505c4bb28872cb6f9fa434
  [libngtcp2-dev]=b6b811a2eddd3284a30d6518869f3b80a3f8ff52fd73992c2eeff968c4ec6ca8
  [libngtcp2-crypto-gnutls8]=b6b9cd2a43019e5d65855d0269206d3980a31de07e6b3bc207c1462ad1a9ce46
  [libngtcp2-crypto-gnutls-dev]=b4d7d3eff780e4e37d983ac01b699bc18baab444e9cceb1b2014531456856879
)
fail() {
  echo "fetch-ngtcp2-1x: $*" >&2
  exit 1
}

[[ $(dpkg --print-architecture 2>/dev/null) == amd64 ]] || fail "only amd64's packages are pinned here"
mkdir -p "$dir/debs"
dir=$(cd "$dir" && pwd)
root=$dir/root
pcdir=$root/usr/lib/x86_64-linux-gnu/pkgconfig
stamp=$root/.unpacked-$version
[[ -e $stamp ]] && exit 0

for pkg in "${!sha256[@]}"; do
  deb=$dir/debs/${pkg}_${version}_amd64.deb
  if [[ ! -s $deb ]] || ! echo "${sha256[$pkg]}  $deb" | sha256sum --check --status; then
    echo "fetch-ngtcp2-1x: downloading $pkg $version"
    curl -fsSL --retry 2 -o "$deb.part" "$pool/${pkg}_${version/\~/%7E}_amd64.deb" ||
      fail "cannot download $pool/${pkg}_${version}_amd64.deb (no network?)"
    echo "${sha256[$pkg]}  $deb.part" | sha256sum --check --status ||
      fail "$pkg's .deb does not have the sha256 pinned in $0"
    mv "$deb.part" "$deb"
  fi
done

rm -rf "$root"
mkdir -p "$root"
for pkg in "${!sha256[@]}"; do
  dpkg -x "$dir/debs/${pkg}_${version}_amd64.deb" "$root" || fail "dpkg -x of $pkg failed"
done
# The .pc files say prefix=/usr, which is the system's 0.x; they are made to name the tree.
for pc in "$pcdir/libngtcp2.pc" "$pcdir/libngtcp2_crypto_gnutls.pc"; do
  [[ -s $pc ]] || fail "$pc is missing from the packages"
  sed -i "s|^prefix=/usr\$|prefix=$root/usr|" "$pc"
done
grep -q '^#define NGTCP2_VERSION "1\.' "$root/usr/include/ngtcp2/version.h" ||
  fail "$root/usr/include/ngtcp2/version.h is not ngtcp2 1.x"
touch "$stamp"
echo "fetch-ngtcp2-1x: ngtcp2 ${version%%-*} unpacked in $root"
