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
# where a browser or client on this host reaches it: a wildcard address
# (0.0.0.0, [::]) is listened on, not browsed to; PUBLIC_URL overrides
# (e.g. https://airlock.example.com behind a proxy)
case $LISTEN in
  0.0.0.0:*) URL=http://127.0.0.1:${LISTEN#0.0.0.0:} ;;
  \[::\]:*) URL=http://[::1]:${LISTEN#\[::\]:} ;;
  *) URL=http://$LISTEN ;;
esac
URL=${PUBLIC_URL:-$URL}
URL=${URL%/}
out=$(./build/airlock admin --state "$STATE" bootstrap)
echo "$out"
key=$(echo "$out" | sed -n 's/^api key: //p')
[ -n "$key" ] || key='YOUR_API_KEY   # created earlier; make another: ./build/airlock admin --state '"$STATE"' key create --person ID'
# the web console: a one-time sign-in link (15 minutes) for the first admin,
# printed each time the service starts (bootstrap names that person)
person=$(echo "$out" | sed -n 's/.*person:\{0,1\} \(per_[0-9a-z]*\).*/\1/p' | head -n 1)
link=
if [ -n "$person" ]; then
  link=$(./build/airlock admin --state "$STATE" login-link --person "$person" --url "$URL") || link=
fi
[ -n "$link" ] || link='(none: ./build/airlock admin --state '"$STATE"' login-link --person ID --url '"$URL"')'
cat <<MSG

airlock is starting on $URL (listening on $LISTEN; state in $STATE, images in $IMAGES).

The web console: open this one-time link within 15 minutes to sign in
(make another: ./build/airlock admin --state $STATE login-link --person ID --url $URL):

  $link

Try:

  curl -s -H 'Authorization: Bearer $key' \\
       -H 'Content-Type: application/json' \\
       '$URL/v1/runs?wait=true' \\
       -d '{"language": "python", "code": "print(6 * 7)"}'

Code written for E2B's SDKs (e2b, @e2b/code-interpreter) runs unchanged with:

  export E2B_API_URL=$URL E2B_SANDBOX_URL=$URL E2B_API_KEY='$key'

API: docs/api.md (its "E2B compatibility" says what differs), or
GET $URL/openapi.json. Stop with Ctrl-C.

MSG
# the service is told PUBLIC_URL too: an https one makes the console's cookie Secure
exec ./build/airlock serve --listen "$LISTEN" --state "$STATE" --images "$IMAGES" ${PUBLIC_URL:+--public_url "$PUBLIC_URL"}
