#!/bin/sh
# The web console's third-party files: installs web/package-lock.json's
# pinned highlight.js with `npm ci` when web/node_modules is missing or
# older than the lock file, and copies the few files the code view uses
# into web/vendor/ (not committed), which the build embeds in the binary
# with the console's own files (scripts/console_assets.py). Run by `make
# build` and `make asan`; needs the network only when it installs.
set -eu
cd "$(dirname "$0")/../web"
stamp=node_modules/.package-lock.json   # npm writes it on every install
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ]; then
    command -v npm >/dev/null || { echo "web.sh: npm is needed (scripts/deps.sh installs it)" >&2; exit 1; }
    npm ci --no-audit --no-fund --loglevel=error </dev/null
fi
src=node_modules/@highlightjs/cdn-assets
mkdir -p vendor
# highlight.js's ES module core and the languages airlock runs (python,
# node, bash): 34 KiB, where the full build is 129 KiB; a light theme
copy() { cmp -s "$1" "$2" || cp "$1" "$2"; }
copy "$src/es/core.min.js" vendor/hljs-core.js
copy "$src/es/languages/python.min.js" vendor/hljs-python.js
copy "$src/es/languages/javascript.min.js" vendor/hljs-javascript.js
copy "$src/es/languages/bash.min.js" vendor/hljs-bash.js
copy "$src/styles/github.min.css" vendor/hljs.css
