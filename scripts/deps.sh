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
