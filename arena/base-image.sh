#!/usr/bin/env bash
# Makes arena/Dockerfile's base images, debian:12 and debian:12-slim, from Debian's own archive,
# for a machine that cannot reach Docker Hub (deb.debian.org is enough): debootstrap's minbase
# into a folder, trimmed the way Debian's official images are, imported with docker or podman.
#   arena/base-image.sh [WORKDIR]     (default /var/tmp/xkit-debian12; needs root and debootstrap)
# DEBIAN_MIRROR overrides http://deb.debian.org/debian. Where Docker Hub is reachable none of
# this is needed: `docker build` pulls the real images.
set -euo pipefail
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=${1:-/var/tmp/xkit-debian12}

. "$(dirname "$0")/image-tool.sh"
pick_image_tool arena/base-image.sh
engine=$tool
command -v debootstrap >/dev/null || { echo "base-image.sh: apt-get install debootstrap" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work"
root=$work/rootfs
debootstrap --variant=minbase bookworm "$root" "$mirror"

# What the official images carry: bookworm, its updates and security; apt that keeps no .debs,
# package caches or translations in a layer.
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/docker-no-languages"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/*
rm -f "$root/var/log/bootstrap.log"
: >"$root/etc/resolv.conf"
echo localhost >"$root/etc/hostname"

import() { # DIR TAG
  tar --numeric-owner -C "$1" -c . | $engine import --change 'CMD ["bash"]' - "$2"
}
import "$root" docker.io/library/debian:12

# -slim: no documentation, manual pages or translations, now or from later installs.
slim=$work/rootfs-slim
cp -a "$root" "$slim"
cat >"$slim/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
find "$slim/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
find "$slim/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$slim"/usr/share/info/* "$slim"/usr/share/linda/* "$slim"/usr/share/lintian/overrides/* \
  "$slim"/usr/share/locale/* "$slim"/usr/share/man/*
import "$slim" docker.io/library/debian:12-slim
$engine images | grep -E 'REPOSITORY|debian'
