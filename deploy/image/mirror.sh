#!/bin/sh
# Print the Debian mirror this machine's apt uses for SUITE ($1, default bookworm): the first
# URI that serves it, from /etc/apt/sources.list (one-line form) or the *.list and *.sources
# (deb822) files in /etc/apt/sources.list.d/. SIDING_IMAGE_MIRROR overrides it.
set -eu
suite=${1:-bookworm}
if [ -n "${SIDING_IMAGE_MIRROR:-}" ]; then echo "$SIDING_IMAGE_MIRROR"; exit 0; fi
apt=${SIDING_APT_DIR:-/etc/apt}
found=$(
  for f in "$apt"/sources.list "$apt"/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    # deb [options] URI SUITE COMPONENTS...
    sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
      awk -v s="$suite" '$1 == "deb" && $3 == s { print $2; exit }'
  done
  for f in "$apt"/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822 stanzas, separated by blank lines: Types, URIs, Suites, ...
    awk -v s="$suite" '
      function flush() { if (deb && hit && uri != "") { print uri; exit } deb = hit = 0; uri = "" }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
      tolower($1) == "uris:" { uri = $2 }
      tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == s) hit = 1 }
      END { flush() }' "$f"
  done | head -n 1
)
if [ -z "$found" ]; then
  echo "error: no apt source for $suite in $apt/sources.list or $apt/sources.list.d/ (set SIDING_IMAGE_MIRROR)" >&2
  exit 1
fi
echo "${found%/}"
