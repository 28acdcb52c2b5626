#!/bin/sh
# `make serve`: first organisation, workspace, person and API key if none
# exist (the key is printed once), a ready-to-paste curl example, then the
# service in the foreground on 127.0.0.1.
set -eu
cd "$(dirname "$0")/.."
STATE=${STATE:-/var/lib/airlock}
# images are where `airlock image build` (run with no --state) put them,
# whatever STATE this service keeps its store in
IMAGES=${IMAGES:-/var/lib/airlock/images}
LISTEN=${LISTEN:-127.0.0.1:8080}
out=$(./build/airlock admin --state "$STATE" bootstrap)
echo "$out"
key=$(echo "$out" | sed -n 's/^api key: //p')
[ -n "$key" ] || key='YOUR_API_KEY   # created earlier; make another: ./build/airlock admin --state '"$STATE"' key create --person ID'
# the web console: a one-time sign-in link (15 minutes) for the first admin,
# printed each time the service starts (bootstrap names that person)
person=$(echo "$out" | sed -n 's/.*person:\{0,1\} \(per_[0-9a-z]*\).*/\1/p' | head -n 1)
link=
if [ -n "$person" ]; then
  link=$(./build/airlock admin --state "$STATE" login-link --person "$person" --url "http://$LISTEN") || link=
fi
[ -n "$link" ] || link='(none: ./build/airlock admin --state '"$STATE"' login-link --person ID --url http://'"$LISTEN"')'
cat <<MSG

airlock is starting on http://$LISTEN (state in $STATE, images in $IMAGES).

The web console: open this one-time link within 15 minutes to sign in
(make another: ./build/airlock admin --state $STATE login-link --person ID):

  $link

Try:

  curl -s -H 'Authorization: Bearer $key' \\
       -H 'Content-Type: application/json' \\
       'http://$LISTEN/v1/runs?wait=true' \\
       -d '{"language": "python", "code": "print(6 * 7)"}'

Code written for E2B's SDKs (e2b, @e2b/code-interpreter) runs unchanged with:

  export E2B_API_URL=http://$LISTEN E2B_SANDBOX_URL=http://$LISTEN E2B_API_KEY='$key'

API: docs/api.md (its "E2B compatibility" says what differs), or
GET http://$LISTEN/openapi.json. Stop with Ctrl-C.

MSG
exec ./build/airlock serve --listen "$LISTEN" --state "$STATE" --images "$IMAGES"
