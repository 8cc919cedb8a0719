#!/usr/bin/env bash
# fetch-ngtcp2-1x.sh DIR — ngtcp2 1.x beside the system's 0.x, never installed: Debian
# bookworm-backports' ngtcp2 packages (the library, its GnuTLS crypto helpers, and their headers)
# downloaded by apt into DIR/debs, through a private apt state in DIR/apt that lists
# bookworm-backports alone (apt checks them against the archive's signed Release, as an install
# would; the system's sources and packages are untouched), unpacked with dpkg -x into DIR/root,
# and their pkg-config files pointed at DIR/root/usr. A build then finds them with
# PKG_CONFIG_PATH=DIR/root/usr/lib/x86_64-linux-gnu/pkgconfig. Whatever version backports holds
# is taken (1.11.0 when this was written); nothing is fetched again while DIR holds an unpacked
# 1.x younger than a week. Used by scripts/install-deps.sh (for the lint.ngtcp2_1x_syntax test)
# and scripts/check-ngtcp2-1x.sh (make check-ngtcp2-1x). Any failure: one line on stderr, exit 1.
set -euo pipefail

dir=${1:?usage: fetch-ngtcp2-1x.sh DIR}
mirror=${NGTCP2_1X_MIRROR:-http://deb.debian.org/debian}
fail() {
  echo "fetch-ngtcp2-1x: $*" >&2
  exit 1
}

[[ $(dpkg --print-architecture 2>/dev/null) == amd64 ]] || fail "only amd64 is laid out here"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
root=$dir/root
pcdir=$root/usr/lib/x86_64-linux-gnu/pkgconfig
stamp=$root/.unpacked
[[ -n $(find "$stamp" -mtime -7 2>/dev/null) ]] && exit 0

# apt with a state of its own: bookworm-backports only, lists and cache under DIR/apt.
state=$dir/apt
mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$dir/debs"
echo "deb $mirror bookworm-backports main" >"$state/sources.list"
apt_opts=(-q -o "Dir::Etc::SourceList=$state/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache" -o Debug::NoLocking=1)
apt-get "${apt_opts[@]}" update >"$state/update.log" 2>&1 ||
  fail "apt-get update of bookworm-backports failed (no network?): $(tail -1 "$state/update.log")"
rm -f "$dir"/debs/*.deb
# The -dev packages, then the runtime libraries they depend on (named by soname, which moves).
(cd "$dir/debs" && apt-get "${apt_opts[@]}" download libngtcp2-dev libngtcp2-crypto-gnutls-dev) \
  >"$state/download.log" 2>&1 || fail "apt-get download failed: $(tail -1 "$state/download.log")"
libs=$(for deb in "$dir"/debs/*-dev_*.deb; do dpkg-deb -f "$deb" Depends; done |
  tr ',' '\n' | sed 's/^ *//; s/ .*//' | grep -E '^libngtcp2-(crypto-gnutls)?[0-9]+$' | sort -u)
[[ -n $libs ]] || fail "the -dev packages name no libngtcp2 runtime package"
# shellcheck disable=SC2086 # one word per package
(cd "$dir/debs" && apt-get "${apt_opts[@]}" download $libs) >>"$state/download.log" 2>&1 ||
  fail "apt-get download of $libs failed: $(tail -1 "$state/download.log")"

rm -rf "$root"
mkdir -p "$root"
for deb in "$dir"/debs/*.deb; do
  dpkg -x "$deb" "$root" || fail "dpkg -x of $deb failed"
done
# The .pc files say prefix=/usr, which is the system's 0.x; they are made to name the tree.
for pc in "$pcdir/libngtcp2.pc" "$pcdir/libngtcp2_crypto_gnutls.pc"; do
  [[ -s $pc ]] || fail "$pc is missing from the packages"
  sed -i "s|^prefix=/usr\$|prefix=$root/usr|" "$pc"
done
grep -q '^#define NGTCP2_VERSION "1\.' "$root/usr/include/ngtcp2/version.h" ||
  fail "$root/usr/include/ngtcp2/version.h is not ngtcp2 1.x"
touch "$stamp"
echo "fetch-ngtcp2-1x: $(grep '^#define NGTCP2_VERSION ' "$root/usr/include/ngtcp2/version.h" | cut -d'"' -f2) unpacked in $root"
