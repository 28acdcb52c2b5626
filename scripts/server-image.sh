#!/bin/sh
# `make server-image`: airlock's server as a container image, in two steps.
#
#   1. `airlock image build --recipe image/server` makes the tree: Debian 12
#      minbase, the libraries the binaries link, CA certificates, user
#      airlock (10001), and the files staged here: this build's airlock and
#      airlock-server (stripped) in /usr/bin, and in /usr/share/airlock/images
#      a REFERENCE ENTRY of every box image of $STATE exported for Kubernetes
#      (`airlock image export`): its info.json, manifest and oci.json, not its
#      rootfs. The kubernetes driver names a pod's image by oci.json's
#      manifest digest and never reads the tree; the native and docker
#      drivers refuse such an entry (src/image: al_image_resolve_ref).
#   2. `airlock image export airlock-server --user 10001` writes it as an OCI
#      layout in $OUT, its manifest digest printed: push it with skopeo.
#
# STATE (default /var/lib/airlock) holds the images (the server image is
# built into it; BOX_IMAGES, default $STATE/images, is where the box images
# are read from); BUILD (default build)
# the binaries; OUT (default $BUILD/server-image) the OCI layout. With
# STAGE=DIR it only stages the image's files (as above) into DIR, which must
# not exist, and stops: the tests run a server on DIR/usr/share/airlock/images
# without building the tree. Needs root
# (debootstrap). Prints the OCI manifest digest on stdout, last.
set -eu
STATE=${STATE:-/var/lib/airlock}
BUILD=${BUILD:-build}
OUT=${OUT:-$BUILD/server-image}
BOX_IMAGES=${BOX_IMAGES:-$STATE/images}
AIRLOCK=$BUILD/airlock
here=$(cd "$(dirname "$0")/.." && pwd)
say() { echo "server-image: $*" >&2; }
die() { echo "server-image: error: $*" >&2; exit 1; }
if [ ! -x "$AIRLOCK" ] || [ ! -x "$BUILD/airlock-server" ]; then die "no $AIRLOCK and $BUILD/airlock-server: make build first"; fi

if [ -n "${STAGE:-}" ]; then
    mkdir "$STAGE" || die "STAGE=$STAGE: cannot make it (it must not exist)"
    stage=$STAGE
else
    stage=$(mktemp -d "${TMPDIR:-/tmp}/airlock-server-files.XXXXXX")
    trap 'rm -rf "$stage"' EXIT
fi
mkdir -p "$stage/usr/bin" "$stage/usr/share/airlock/images/aliases"
install -m 0755 -s "$AIRLOCK" "$BUILD/airlock-server" "$stage/usr/bin/"

# the box images the server will name: every one exported (oci.json), as a
# reference entry, with the aliases that name it
n=0
for d in "$BOX_IMAGES"/sha256-*; do
    [ -f "$d/oci.json" ] || continue
    # (a server image exported before is not a box image)
    ! grep -q '"recipe": *"[^"]*/image/server"' "$d/info.json" || continue
    e=$stage/usr/share/airlock/images/$(basename "$d")
    mkdir "$e"
    cp "$d/info.json" "$d/manifest" "$d/oci.json" "$e/"
    for a in "$BOX_IMAGES"/aliases/*; do
        [ -f "$a" ] && [ "$(cat "$a")" = "sha256:${d##*/sha256-}" ] && cp "$a" "$stage/usr/share/airlock/images/aliases/"
    done
    say "box image $(basename "$d") ($(sed -n 's/.*"manifest_digest": *"\([^"]*\)".*/\1/p' "$d/oci.json"))"
    n=$((n + 1))
done
[ "$n" -gt 0 ] || die "no box image in $BOX_IMAGES was exported for Kubernetes: run \`airlock image --state $STATE export default --out DIR\` (and push DIR) first"
[ -z "${STAGE:-}" ] || { say "staged in $STAGE"; exit 0; }

say "building the tree (image/server)"
AIRLOCK_SERVER_FILES=$stage "$AIRLOCK" image --state "$STATE" build --recipe "$here/image/server" --alias airlock-server >/dev/null
rm -rf "$OUT"
say "exporting to $OUT"
"$AIRLOCK" image --state "$STATE" export airlock-server --out "$OUT" --format oci --user 10001 --json
