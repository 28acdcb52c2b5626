#!/bin/sh
# Builds one of airlock's runtime images (a root filesystem tree) into DEST.
#
#   sh image/NAME/build.sh DEST
#
# This one script serves every recipe: image/default (Debian 13 trixie) and
# image/bookworm (Debian 12) hold a link to it beside their own `config`
# (the Debian suite and the Python libraries promised), `packages` and
# `drop`, and it reads those from the directory it was run from. (A
# recipe's hash is over its files' contents, the link's target included, so
# a change here is a new recipe for both.)
#
# DEST must not exist or must be an empty directory. The tree is made with
# debootstrap (minbase + the recipe's packages) from the mirror the host's
# apt uses for that suite, else deb.debian.org (AIRLOCK_IMAGE_MIRROR
# overrides). Then the matplotlib font cache is built,
# /usr/share/airlock/manifest.json records what the image holds, and every
# package manager (apt, dpkg, debconf, pip, ensurepip, npm, corepack) is
# removed with its caches and data, along with docs, man pages and locales.
# A recipe whose config sets KEEP="pip npm" keeps those two (image/installer:
# the image package installs run in, never a run's own image).
# No setuid/setgid bit is left.
#
# Needs root, debootstrap and chroot. Reads no standard input. On any failure
# DEST is removed, so nothing half built is left behind, and the exit is
# non-zero.
set -eu

FALLBACK_MIRROR=http://deb.debian.org/debian
STEPS=9
MPLDIR=/usr/share/airlock/matplotlib
MANIFEST=/usr/share/airlock/manifest.json

say() { echo "image: $*"; }
die() { echo "image: error: $*" >&2; exit 1; }
step() { n=$1; shift; say "step $n/$STEPS: $*"; }

[ $# -eq 1 ] || { echo "usage: sh build.sh DEST" >&2; exit 2; }
[ -n "$1" ] || die "DEST is empty"

# the recipe: the directory this was run from (through its link), not the
# link's target
here=$(cd "$(dirname "$0")" && pwd)
name=$(basename "$here")
conffile=$here/config
pkgfile=$here/packages
dropfile=$here/drop
[ -r "$conffile" ] || die "recipe settings $conffile not readable"
[ -r "$pkgfile" ] || die "package list $pkgfile not readable"
[ -r "$dropfile" ] || die "drop list $dropfile not readable"
SUITE="" PYLIBS="" KEEP=""
# shellcheck disable=SC1090
. "$conffile"
[ -n "$SUITE" ] || die "$conffile sets no SUITE"
[ -n "$PYLIBS" ] || die "$conffile sets no PYLIBS"
for k in $KEEP; do
    case $k in pip|npm) ;; *) die "$conffile: KEEP names $k; only pip and npm may be kept" ;; esac
done
kept() { case " $KEEP " in *" $1 "*) return 0 ;; esac; return 1; }
[ -e "/usr/share/debootstrap/scripts/$SUITE" ] || [ ! -d /usr/share/debootstrap/scripts ] ||
    die "this debootstrap has no script for $SUITE (/usr/share/debootstrap/scripts/$SUITE): a newer debootstrap has one, or link it to sid's"
[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap and chroot need it)"
command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found (apt-get install debootstrap)"
command -v chroot >/dev/null 2>&1 || die "chroot not found"

# --- DEST: must be new or empty; made absolute ------------------------------
if [ -e "$1" ] || [ -L "$1" ]; then
    if [ ! -d "$1" ] || [ -L "$1" ]; then die "$1 exists and is not a directory"; fi
    [ -z "$(ls -A "$1")" ] || die "$1 is not empty; refusing to build into it"
fi
mkdir -p "$1"
DEST=$(cd "$1" && pwd -P)
[ "$DEST" != / ] || die "refusing to build into /"

# --- failure handling: unmount anything under DEST, remove it ---------------
finished=0
cleanup() {
    rc=$?
    [ "$finished" -eq 1 ] && return 0
    [ "$rc" -ne 0 ] || rc=1
    echo "image: build FAILED (exit $rc); removing $DEST" >&2
    if [ -f "$DEST/debootstrap/debootstrap.log" ]; then
        echo "image: last lines of debootstrap.log:" >&2
        tail -n 15 "$DEST/debootstrap/debootstrap.log" | sed 's/^/image:   /' >&2
    fi
    # debootstrap mounts proc/sys inside the target; never rm through a mount.
    awk -v d="$DEST" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/mounts |
        sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" || true; done
    rm -rf --one-file-system "$DEST" || echo "image: could not fully remove $DEST" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# --- step 1: package list and mirror ----------------------------------------
step 1 "reading package list and finding the $SUITE mirror"
pkgs=$(sed 's/#.*//' "$pkgfile" | tr -s ' \t' '\n' | sed '/^$/d')
[ -n "$pkgs" ] || die "package list $pkgfile is empty"
include=$(echo "$pkgs" | paste -sd, -)
say "  $(echo "$pkgs" | wc -l) packages: $include"
drops=$(sed 's/#.*//' "$dropfile" | tr -s ' \t' '\n' | sed '/^$/d')
for p in $drops; do
    if echo "$pkgs" | grep -qx "$p"; then die "$p is both in $pkgfile and in $dropfile"; fi
done

# First http(s) URI that serves "$SUITE main" in the host's apt sources:
# one-line format (sources.list, sources.list.d/*.list), then deb822 (*.sources).
find_mirror() {
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk -v s="$SUITE" '
            $1 == "deb" && $3 == s { for (i = 4; i <= NF; i++) if ($i == "main") { print $2; exit } }'
    done
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk -v s="$SUITE" '
            function flush(   n, i, a, ok) {
                if (en != "no" && (" " ty " ") ~ / deb / && (" " su " ") ~ (" " s " ") && (" " co " ") ~ / main /) {
                    n = split(ur, a, " "); for (i = 1; i <= n; i++) print a[i]
                }
                ty = ur = su = co = en = ""; key = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            /^[ \t]/ { val = $0; sub(/^[ \t]+/, "", val); add(key, val); next }
            {
                key = tolower($0); sub(/:.*/, "", key)
                val = $0; sub(/^[^:]*:[ \t]*/, "", val); add(key, val)
            }
            function add(k, v) {
                if (k == "types") ty = ty " " v; else if (k == "uris") ur = ur " " v
                else if (k == "suites") su = su " " v; else if (k == "components") co = co " " v
                else if (k == "enabled") en = tolower(v)
            }
            END { flush() }' "$f"
    done
}
if [ -n "${AIRLOCK_IMAGE_MIRROR:-}" ]; then
    mirror=$AIRLOCK_IMAGE_MIRROR
    say "  mirror $mirror (from AIRLOCK_IMAGE_MIRROR)"
else
    mirror=$(find_mirror | grep -E '^https?://' | head -n 1 || true)
    if [ -n "$mirror" ]; then
        say "  mirror $mirror (from host apt sources)"
    else
        mirror=$FALLBACK_MIRROR
        say "  mirror $mirror (fallback: no $SUITE main source in host apt config)"
    fi
fi

# --- step 2: debootstrap ------------------------------------------------------
step 2 "debootstrap --variant=minbase $SUITE (this downloads 150-180 MB and takes minutes)"
if ! debootstrap --variant=minbase --include="$include" "$SUITE" "$DEST" "$mirror" </dev/null; then
    echo "image: error: debootstrap failed (see its E: line above): either the mirror" >&2
    echo "image: error:   $mirror is unreachable (no network?), or a package" >&2
    echo "image: error:   listed in $pkgfile does not exist in $SUITE" >&2
    exit 1
fi

# Run a command in the new tree with a small, fixed environment.
inroot() {
    chroot "$DEST" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin \
        HOME=/tmp LANG=C.UTF-8 "$@" </dev/null
}

# debootstrap only warns about some unresolvable names; insist on every one.
# shellcheck disable=SC2016
installed=$(inroot dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" { print $2 }')
notfound=""
for p in $pkgs; do
    echo "$installed" | grep -qx "$p" || notfound="$notfound $p"
done
[ -z "$notfound" ] || die "packages not installed after debootstrap:$notfound"
say "  $(echo "$installed" | wc -l) Debian packages installed"

# --- step 3: drop what only the suite's metadata wants ---------------------
step 3 "purging build-time-only dependencies: $(echo "$drops" | paste -sd" " -)"
# Keep the dependency closure (Depends, Pre-Depends) of the requested packages
# and of the minbase system (Essential or Priority: required), never following
# into a dropped package; everything else installed goes.
# shellcheck disable=SC2016
purge=$(inroot python3 -c '
import re, sys
want, drop = sys.argv[1].split(), set(sys.argv[2].split())
pk, prov = {}, {}
for b in open("/var/lib/dpkg/status").read().split("\n\n"):
    f = dict(re.findall(r"^([\w-]+): ?(.*)$", b, re.M))
    if not f.get("Status", "").endswith(" installed"):
        continue
    pk[f["Package"]] = f
    for v in [f["Package"]] + [x.split()[0] for x in f.get("Provides", "").split(",") if x.strip()]:
        prov.setdefault(v, []).append(f["Package"])
missing = drop - set(pk)
if missing:
    sys.exit("drop list names packages that are not installed: " + " ".join(sorted(missing)))
base = sorted(n for n, f in pk.items() if f.get("Essential") == "yes" or f.get("Priority") == "required")
keep, todo = set(), list(want) + base
while todo:
    n = todo.pop(0)
    if n in keep or n in drop:
        continue
    keep.add(n)
    for fld in ("Pre-Depends", "Depends"):
        for clause in pk[n].get(fld, "").split(","):
            alts = [a.split()[0].split(":")[0] for a in clause.split("|") if a.strip()]
            cands = [c for a in alts for c in prov.get(a, []) if c not in drop]
            if cands and not any(c in keep for c in cands):
                todo.append(cands[0])
print(" ".join(sorted(set(pk) - keep)))
' "$pkgs" "$drops") || die "could not work out what to purge"
say "  purging $(echo "$purge" | wc -w) packages: $purge"
if [ -n "$purge" ]; then
    # shellcheck disable=SC2086
    inroot dpkg --purge --force-depends $purge >"$DEST/tmp/purge.log" 2>&1 || {
        sed 's/^/image:   /' "$DEST/tmp/purge.log" >&2
        die "dpkg --purge failed"
    }
    rm -f "$DEST/tmp/purge.log"
fi
# shellcheck disable=SC2016
left=$(inroot dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii"' | wc -l)
say "  $left Debian packages left"

# --- step 4: matplotlib font cache ------------------------------------------
step 4 "building matplotlib font cache in $MPLDIR"
mkdir -p "$DEST$MPLDIR"
inroot MPLCONFIGDIR=$MPLDIR python3 -c 'import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt; import matplotlib.font_manager' \
    || die "importing matplotlib in the image failed"
# The font list follows directory-listing order; sort it so that two builds
# of the same packages give the same bytes (and the same image digest).
inroot MPLCONFIGDIR=$MPLDIR python3 -c '
import glob, matplotlib.font_manager as fm
for path in glob.glob(fm.mpl.get_cachedir() + "/fontlist-*.json"):
    m = fm.json_load(path)
    m.ttflist.sort(key=lambda e: (e.fname, e.name, e.style, e.weight))
    m.afmlist.sort(key=lambda e: (e.fname, e.name, e.style, e.weight))
    fm.json_dump(m, path)
' || die "could not normalise the matplotlib font cache"
produced=$(cd "$DEST$MPLDIR" && find . -type f | sed 's|^\./||' | sort)
[ -n "$produced" ] || die "matplotlib produced no cache files in $MPLDIR"
echo "$produced" | grep -q '^fontlist-.*\.json$' || die "no fontlist-*.json in $MPLDIR"
for f in $produced; do say "  produced $MPLDIR/$f ($(wc -c <"$DEST$MPLDIR/$f") bytes)"; done
chmod -R u=rwX,go=rX "$DEST/usr/share/airlock"
# Debian's sitecustomize (a conffile of libpython3.X-minimal) imports
# apport_python_hook, which only Ubuntu ships; that failed import walks
# every sys.path entry at each Python start (about 0.3 ms of a box's
# `python3 -c pass`, -X importtime). The module stays, holding only this reason, so
# `import sitecustomize` still succeeds at once; its byte code is checked by
# the source's hash, not its mtime, so that the read-only image never
# recompiles it and two builds give the same bytes.
for f in "$DEST"/etc/python3.*/sitecustomize.py; do
    [ -e "$f" ] || continue
    grep -q '^ *import apport_python_hook' "$f" || die "${f#"$DEST"} no longer is Debian's apport hook: look at it again"
    echo '# airlock image: Debian imports apport_python_hook here, which no Debian package ships.' >"$f"
    v=${f#"$DEST"/etc/python}; v=${v%/sitecustomize.py}
    inroot "python$v" -c 'import py_compile, sys; py_compile.compile(sys.argv[1], doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)' \
        "/usr/lib/python$v/sitecustomize.py" || die "could not compile /usr/lib/python$v/sitecustomize.py"
    say "  emptied ${f#"$DEST"} (it imported apport_python_hook, which is not in Debian)"
done

# --- step 5: manifest ---------------------------------------------------------
step 5 "writing $MANIFEST"
# shellcheck disable=SC2016
inroot python3 -c '
import json, subprocess, sys, platform, importlib, importlib.metadata as md
manifest_path, name, mirror, suite, mpldir, pyl, pkgs, cache, drops, purged = sys.argv[1:11]
libs = {}
for spec in pyl.split():
    dist, mod = spec.split(":")
    try:
        v = md.version(dist)
    except md.PackageNotFoundError:
        v = getattr(importlib.import_module(mod), "__version__", None)
    if not v:
        sys.exit("no version for " + dist)
    libs[dist] = {"module": mod, "version": v}
node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True).stdout.strip()
out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Version}\t${Architecture}\n"],
                     capture_output=True, text=True, check=True).stdout
debs = [dict(zip(("name", "version", "arch"), l.split("\t"))) for l in out.splitlines() if l]
osr = dict(l.split("=", 1) for l in open("/etc/os-release").read().splitlines() if "=" in l)
system = {"name": osr["PRETTY_NAME"].strip(chr(34)), "version_id": osr.get("VERSION_ID", "").strip(chr(34)),
          "debian_version": open("/etc/debian_version").read().strip()}
m = {
    "format": 1,
    "name": name,
    "system": system,
    "source": {"suite": suite, "mirror": mirror, "variant": "minbase", "requested": pkgs.split(),
               "dropped": drops.split(), "purged": purged.split()},
    "python": {"version": platform.python_version(), "executable": "/usr/bin/python3", "libraries": libs},
    "node": {"version": node.lstrip("v"), "executable": "/usr/bin/node"},
    "environment": {"HOME": "/tmp", "MPLCONFIGDIR": "/tmp/.matplotlib", "LANG": "C.UTF-8"},
    "matplotlib_cache": {"dir": mpldir, "files": cache.split()},
    "debian_packages": sorted(debs, key=lambda d: d["name"]),
}
with open(manifest_path, "w") as f:
    json.dump(m, f, indent=2, sort_keys=True)
    f.write("\n")
print("image:   %s, python %s, node %s, %s" % (system["name"], m["python"]["version"], m["node"]["version"],
      ", ".join("%s %s" % (k, v["version"]) for k, v in libs.items())))
' "$MANIFEST" "$name" "$mirror" "$SUITE" "$MPLDIR" "$PYLIBS" "$pkgs" "$produced" "$drops" "$purge" \
    || die "could not write the manifest"
chmod 0644 "$DEST$MANIFEST"

# --- step 6: remove package managers, caches, docs --------------------------
step 6 "removing package managers (apt, dpkg, debconf, pip, ensurepip, npm, corepack), caches, docs"
removed=0
zap() {
    for pat in "$@"; do
        for p in "$DEST"$pat; do
            [ -e "$p" ] || [ -L "$p" ] || continue
            say "  removed ${p#"$DEST"}"
            rm -rf --one-file-system "$p"
            removed=$((removed + 1))
        done
    done
}
# apt
zap '/usr/bin/apt' '/usr/bin/apt-*' '/usr/lib/apt' '/etc/apt' '/var/lib/apt' '/var/cache/apt' \
    '/usr/lib/*-linux-gnu/libapt-*' '/etc/cron.daily/apt-compat' '/etc/logrotate.d/apt' \
    '/lib/systemd/system/apt-*' '/usr/lib/systemd/system/apt-*' \
    '/usr/share/bash-completion/completions/apt*' '/usr/share/apt' '/usr/share/bug/apt'
# dpkg
zap '/usr/bin/dpkg' '/usr/bin/dpkg-*' '/usr/sbin/dpkg-*' '/usr/bin/update-alternatives' \
    '/usr/sbin/update-alternatives' '/var/lib/dpkg' '/etc/dpkg' '/usr/lib/dpkg' '/usr/libexec/dpkg' \
    '/usr/share/dpkg' '/etc/cron.daily/dpkg' '/etc/logrotate.d/dpkg' '/lib/systemd/system/dpkg-*' \
    '/usr/lib/systemd/system/dpkg-*' '/usr/share/bash-completion/completions/dpkg*' '/usr/share/bug/dpkg'
# the timers of both, and the state of deb-systemd-helper (a dpkg maintainer
# script's tool): links to the units just removed
zap '/etc/systemd/system/*.wants/apt-*' '/etc/systemd/system/*.wants/dpkg-*' \
    '/var/lib/systemd/deb-systemd-helper-enabled' '/var/lib/systemd/deb-systemd-helper-masked'
# debconf
zap '/usr/bin/debconf' '/usr/bin/debconf-*' '/usr/share/debconf' '/var/cache/debconf' \
    '/etc/debconf.conf' '/usr/share/perl5/Debconf' '/usr/share/perl5/Debian/DebConf' \
    '/usr/lib/python3/dist-packages/debconf.py'
# pip, ensurepip (unless the recipe keeps pip)
kept pip || zap '/usr/bin/pip' '/usr/bin/pip3' '/usr/bin/pip3.*' '/usr/lib/python3/dist-packages/pip' \
    '/usr/lib/python3/dist-packages/pip-*' '/usr/lib/python3*/ensurepip' \
    '/usr/lib/python3*/site-packages/pip' '/usr/share/python-wheels'
# npm, npx, corepack (unless the recipe keeps npm: then npm and npx stay)
kept npm || zap '/usr/bin/npm' '/usr/bin/npx' '/usr/share/nodejs/npm' '/usr/lib/node_modules/npm'
zap '/usr/bin/corepack' '/usr/share/nodejs/corepack' '/usr/lib/node_modules/corepack'
# logs, docs, man, info
zap '/var/log/*' '/usr/share/doc' '/usr/share/man' '/usr/share/info' '/usr/share/lintian'
# locales: keep C (and C.*) and top-level files such as locale.alias
nloc=0
for p in "$DEST"/usr/share/locale/*/; do
    [ -d "$p" ] || continue
    case $(basename "$p") in C|C.*) continue;; esac
    rm -rf --one-file-system "$p"
    nloc=$((nloc + 1))
done
say "  removed $nloc directories /usr/share/locale/* (all but C)"
# device nodes (the sandbox makes its own /dev), ldconfig's inode cache,
# host data debootstrap copies in, and anything left in scratch dirs
zap '/dev/*' '/var/cache/ldconfig/aux-cache' '/etc/resolv.conf' '/etc/hostname' '/tmp/*' '/tmp/.[!.]*' \
    '/var/tmp/*' '/root/.cache' '/etc/passwd-' \
    '/etc/group-' '/etc/shadow' '/etc/shadow-' '/etc/gshadow' '/etc/gshadow-'
echo airlock >"$DEST/etc/hostname"
say "  $removed paths removed"
gone="apt apt-get dpkg dpkg-query corepack debconf"
kept pip || gone="$gone pip pip3"
kept npm || gone="$gone npm npx"
for b in $gone; do
    for d in /usr/bin /bin /usr/sbin /sbin /usr/local/bin; do
        [ ! -e "$DEST$d/$b" ] || die "$d/$b still present after removal"
    done
done

# --- step 7: no setuid/setgid -----------------------------------------------
step 7 "clearing setuid/setgid bits"
nsid=$(find "$DEST" -xdev -perm /6000 ! -type l | wc -l)
find "$DEST" -xdev -perm /6000 ! -type l -print -exec chmod ug-s {} + | sed "s|^$DEST|image:   cleared |"
[ -z "$(find "$DEST" -xdev -perm /6000 ! -type l)" ] || die "setuid/setgid files remain"
say "  $nsid paths cleared"

# --- step 8: users and groups -----------------------------------------------
step 8 "writing /etc/passwd and /etc/group"
cat >"$DEST/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/tmp:/usr/sbin/nologin
EOF
cat >"$DEST/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
chmod 0644 "$DEST/etc/passwd" "$DEST/etc/group"

# --- step 9: check -------------------------------------------------------------
step 9 "checking the image"
mods=$(for s in $PYLIBS; do printf '%s,' "${s#*:}"; done)
inroot python3 -c "import ${mods%,}" || die "a Python library does not import"
[ "$(inroot node -e 'console.log(1)')" = 1 ] || die "node does not run"
if kept pip; then inroot python3 -m pip --version >/dev/null || die "pip was kept but does not run"; fi
if kept npm; then inroot npm --version >/dev/null || die "npm was kept but does not run"; fi
[ -z "$(ls -A "$DEST/dev")" ] || die "something was created in /dev during the checks"
# the checks' own leftovers (matplotlib makes $HOME/.config/matplotlib)
find "$DEST/tmp" "$DEST/var/tmp" -xdev -mindepth 1 -delete
say "  $(du -sh "$DEST" | cut -f1) in $DEST"

finished=1
say "done: $DEST"
