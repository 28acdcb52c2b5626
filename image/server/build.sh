#!/bin/sh
# Builds airlock's SERVER image (the container the Helm chart and the
# kustomize base run) as an airlock image tree into DEST:
#
#   AIRLOCK_SERVER_FILES=DIR sh image/server/build.sh DEST
#
# `make server-image` is the way to run it: it stages DIR (usr/bin/airlock,
# usr/bin/airlock-server, and usr/share/airlock/images, the box images'
# reference entries) and then exports the image for a registry.
#
# Debian 12 (bookworm) minbase, the runtime libraries both binaries link
# (`packages`), CA certificates; then apt, dpkg, debconf, docs and caches go,
# no setuid/setgid bit is left, and the user airlock (10001) is the only one
# besides root and nobody. It is not image/build.sh (the box images' script):
# a box image promises Python and Node and is checked with them; this one
# holds neither, and its manifest is written from the host.
#
# Needs root, debootstrap and chroot. On any failure DEST is removed.
set -eu

SUITE=bookworm
FALLBACK_MIRROR=http://deb.debian.org/debian
MANIFEST=/usr/share/airlock/manifest.json
say() { echo "image: $*"; }
die() { echo "image: error: $*" >&2; exit 1; }

[ $# -eq 1 ] || { echo "usage: AIRLOCK_SERVER_FILES=DIR sh build.sh DEST" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
FILES=${AIRLOCK_SERVER_FILES:-}
[ -n "$FILES" ] || die "AIRLOCK_SERVER_FILES is not set: name the staged files (make server-image does)"
if [ ! -x "$FILES/usr/bin/airlock" ] || [ ! -x "$FILES/usr/bin/airlock-server" ]; then
    die "$FILES holds no usr/bin/airlock and usr/bin/airlock-server"
fi
[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap and chroot need it)"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found (apt-get install debootstrap)"
pkgs=$(sed 's/#.*//' "$here/packages" | tr -s ' \t' '\n' | sed '/^$/d')
include=$(echo "$pkgs" | paste -sd, -)

if [ -e "$1" ] && [ -n "$(ls -A "$1")" ]; then die "$1 is not empty; refusing to build into it"; fi
mkdir -p "$1"
DEST=$(cd "$1" && pwd -P)
[ "$DEST" != / ] || die "refusing to build into /"
finished=0
cleanup() {
    rc=$?
    [ "$finished" -eq 1 ] && return 0
    [ "$rc" -ne 0 ] || rc=1
    echo "image: build FAILED (exit $rc); removing $DEST" >&2
    awk -v d="$DEST" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts |
        sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" || true; done
    rm -rf --one-file-system "$DEST" || true
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

mirror=${AIRLOCK_IMAGE_MIRROR:-$FALLBACK_MIRROR}
say "step 1/5: debootstrap --variant=minbase $SUITE from $mirror with $include"
debootstrap --variant=minbase --include="$include" "$SUITE" "$DEST" "$mirror" </dev/null ||
    die "debootstrap failed (the mirror $mirror unreachable, or a package in $here/packages not in $SUITE)"
inroot() { chroot "$DEST" /usr/bin/env -i PATH=/usr/bin:/bin:/usr/sbin:/sbin LANG=C.UTF-8 "$@" </dev/null; }

say "step 2/5: the airlock binaries and the box images' reference entries"
cp -a --no-preserve=ownership "$FILES/." "$DEST/"
chown -R 0:0 "$DEST/usr/bin/airlock" "$DEST/usr/bin/airlock-server"
[ ! -d "$DEST/usr/share/airlock" ] || { chown -R 0:0 "$DEST/usr/share/airlock"; chmod -R u=rwX,go=rX "$DEST/usr/share/airlock"; }
# every library both binaries need resolves in the tree, or the image is no good
missing=$(inroot sh -c 'ldd /usr/bin/airlock /usr/bin/airlock-server' | grep 'not found' || true)
[ -z "$missing" ] || die "libraries missing in the image: $missing"
inroot /usr/bin/airlock --version >/dev/null 2>&1 || inroot /usr/bin/airlock --help >/dev/null 2>&1 ||
    die "/usr/bin/airlock does not run in the image"

say "step 3/5: writing $MANIFEST"
# shellcheck disable=SC2016
debs=$(inroot dpkg-query -W -f='{"name": "${Package}", "version": "${Version}", "arch": "${Architecture}"}\n' | sort | paste -sd, -)
# shellcheck disable=SC1091
pretty=$(. "$DEST/etc/os-release" && echo "$PRETTY_NAME")
# shellcheck disable=SC1091
vid=$(. "$DEST/etc/os-release" && echo "$VERSION_ID")
mkdir -p "$DEST/usr/share/airlock"
printf '{"format": 1, "name": "server", "system": {"name": "%s", "version_id": "%s", "debian_version": "%s"}, "source": {"suite": "%s", "mirror": "%s", "variant": "minbase", "requested": [%s]}, "user": 10001, "debian_packages": [%s]}\n' \
    "$pretty" "$vid" "$(cat "$DEST/etc/debian_version")" "$SUITE" "$mirror" \
    "$(echo "$pkgs" | sed 's/.*/"&"/' | paste -sd, -)" "$debs" >"$DEST$MANIFEST"
chmod 0644 "$DEST$MANIFEST"

say "step 4/5: removing apt, dpkg, debconf, docs, caches; clearing setuid/setgid"
for p in /usr/bin/apt /usr/bin/apt-* /usr/lib/apt /etc/apt /var/lib/apt /var/cache/apt \
    /usr/lib/*-linux-gnu/libapt-* /usr/bin/dpkg /usr/bin/dpkg-* /usr/sbin/dpkg-* /var/lib/dpkg /etc/dpkg \
    /usr/share/dpkg /usr/bin/debconf /usr/bin/debconf-* /usr/share/debconf /var/cache/debconf \
    /usr/share/perl5/Debconf /var/log/* /usr/share/doc /usr/share/man /usr/share/info /usr/share/lintian \
    /usr/share/locale/* /dev/* /var/cache/ldconfig/aux-cache /etc/resolv.conf /tmp/* /var/tmp/* \
    /etc/shadow /etc/shadow- /etc/gshadow /etc/gshadow- /etc/passwd- /etc/group- /debootstrap; do
    for q in "$DEST"$p; do
        [ -e "$q" ] || [ -L "$q" ] || continue
        rm -rf --one-file-system "$q"
    done
done
find "$DEST" -xdev -perm /6000 ! -type l -exec chmod ug-s {} +
[ -z "$(find "$DEST" -xdev -perm /6000 ! -type l)" ] || die "setuid/setgid files remain"
for b in apt apt-get dpkg; do [ ! -e "$DEST/usr/bin/$b" ] || die "/usr/bin/$b still present"; done

say "step 5/5: users (airlock 10001) and the state directory"
cat >"$DEST/etc/passwd" <<'EOT'
root:x:0:0:root:/root:/usr/sbin/nologin
airlock:x:10001:10001:airlock:/var/lib/airlock:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOT
cat >"$DEST/etc/group" <<'EOT'
root:x:0:
airlock:x:10001:
nogroup:x:65534:
EOT
chmod 0644 "$DEST/etc/passwd" "$DEST/etc/group"
echo airlock >"$DEST/etc/hostname"
# the chart mounts an emptyDir on the state directory; without one (a plain
# docker run) it is the server user's own. /etc/airlock is where a config
# is mounted.
mkdir -p "$DEST/var/lib/airlock" "$DEST/etc/airlock"
chmod 0755 "$DEST/etc/airlock"
chown 10001:10001 "$DEST/var/lib/airlock"
chmod 0700 "$DEST/var/lib/airlock"
say "  $(du -sh "$DEST" | cut -f1) in $DEST"
finished=1
say "done: $DEST"
