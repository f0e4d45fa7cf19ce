#!/bin/bash
# `make image`: build localhost/siding:VERSION (VERSION from pyproject.toml), also tagged :latest,
# from Debian packages only (base.sh) and the wheels built here. Prints the image's name on the
# last line of stdout. The test (tests/e2e/test_image.py) builds through this script too.
#
# What is cached outside the checkout (${SIDING_IMAGE_CACHE:-$XDG_CACHE_HOME/siding/image}):
# the Debian root (base.sh) and the runtime lock's wheels (wheels-KEY/), each keyed by what it
# is made from; podman's own layer cache then keeps every layer whose inputs did not change, so
# a warm build redoes only siding's own wheels (the top layers).
#
# PYTHON (default .venv/bin/python, a Python 3.11 like the image's) builds the wheels.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$here/env.sh"
PYTHON=${PYTHON:-$root/.venv/bin/python}
started=$(date +%s)

for tool in podman debootstrap; do
  command -v "$tool" >/dev/null || { echo "error: $tool not found: run make image-tools (apt, as root)" >&2; exit 1; }
done
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
  { echo "error: $PYTHON is not Python 3.11 (the image's): its wheels would not fit" >&2; exit 1; }
version=$("$PYTHON" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$root/pyproject.toml")
name="localhost/siding:$version"

cache=${SIDING_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/siding/image}
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9  # one build at a time on this machine; the next one finds everything cached

base=$("$here/base.sh")

context=$(mktemp -d "$cache/context.XXXXXX")
trap 'rm -rf "$context"' EXIT
cp "$here/healthcheck.py" "$context/"

# The runtime lock without its ./sdk/python line (the SDK comes as a wheel below), as wheels
# for this Python, once per lock.
grep -v -e '^\./' -e '^#' -e '^$' "$root/requirements/runtime.txt" > "$context/requirements.txt"
wkey=$("$PYTHON" -c 'import sys; print(sys.version_info[:2])' | cat - "$context/requirements.txt" |
  sha256sum | cut -c1-16)
wheelhouse="$cache/wheels-$wkey"
if [ ! -f "$wheelhouse/requirements.txt" ]; then
  echo "image: wheels of the runtime lock into $wheelhouse" >&2
  rm -rf "$wheelhouse.part"
  "$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps \
    --wheel-dir "$wheelhouse.part" -r "$context/requirements.txt" >&2
  cp "$context/requirements.txt" "$wheelhouse.part/"
  mv "$wheelhouse.part" "$wheelhouse"
  find "$cache" -maxdepth 1 -name 'wheels-*' ! -name "wheels-$wkey" -exec rm -rf {} +
fi
cp -al "$wheelhouse" "$context/wheels" 2>/dev/null || cp -a "$wheelhouse" "$context/wheels"

# The jars, verified against the lock on this machine (fetched once, or already there).
jars=$(cd "$root" && "$PYTHON" -c 'from siding import jvm; print(jvm.fetch())')
cp -rL "$jars" "$context/jars"
chmod -R a+rX "$context/jars"  # a stamp written by an older siding was private to its user

# siding's wheel and the SDK's, with the build tools of PYTHON's environment (no download).
for project in "$root/sdk/python" "$root"; do
  "$PYTHON" -m build --no-isolation --wheel --outdir "$context/dist" "$project" >/dev/null
done

# What the wheels hold (names and CRCs, not the zip's dates): the top layer is rebuilt exactly
# when siding's code or the SDK's changed (a RUN's bind mount is not part of podman's cache key).
dkey=$("$PYTHON" - "$context"/dist/*.whl <<'PY'
import hashlib, sys, zipfile
digest = hashlib.sha256()
for path in sorted(sys.argv[1:]):
    for entry in sorted(zipfile.ZipFile(path).infolist(), key=lambda e: e.filename):
        digest.update(f"{entry.filename} {entry.CRC}\n".encode())
print(digest.hexdigest()[:16])
PY
)
echo "image: building $name on $base ($SIDING_IMAGE_STORAGE storage)" >&2
podman build --format docker --layers --network host \
  --build-arg "BASE=$base" --build-arg "WHEELS=$wkey" --build-arg "DIST=$dkey" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.source=siding (deploy/image)" \
  -f "$here/Containerfile" -t "$name" -t localhost/siding:latest "$context" >&2
podman image prune --force >/dev/null  # the untagged images earlier builds left
size=$(podman image inspect --format '{{.Size}}' "$name")
echo "image: $name, $((size / 1000000)) MB, built in $(($(date +%s) - started)) s" >&2
echo "$name"
