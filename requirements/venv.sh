#!/usr/bin/env bash
# requirements/venv.sh PYTHON VENV: the development venv that `make setup` makes (its pinned
# packages; siding and the SDK are then installed editable by the Makefile). The packages are
# installed once per lock and Python into the user's cache (1.2 GB, two minutes of pip on two
# cores) and hard-linked into VENV (a copy where a link cannot be made): a fresh clone gets its
# venv in seconds. The cached files are never written through VENV: what holds VENV's own path
# (the scripts' first lines, the activate scripts, pyvenv.cfg) is replaced by a new file. So do
# not edit a package's file in place under VENV/lib (pip install, upgrade and uninstall are fine:
# they write new files): it is the cache's file too.
set -euo pipefail
python=$1
venv=$2

cache=${XDG_CACHE_HOME:-$HOME/.cache}/siding/venvs
mkdir -p "$cache"
# The key: the locks, and the Python (its version and where it is: a venv links to it).
version=$("$python" -c 'import sys; print(sys.version)')
key=$({ cat requirements/dev.txt requirements/runtime.txt; echo "$version"; command -v "$python"; } \
  | sha256sum | cut -c1-16)
built=$cache/$key

exec 9>"$cache/.lock"
flock 9 # one builder at a time; the others wait and link its venv
if [ ! -f "$built/.complete" ]; then
  echo "venv: installing requirements/dev.txt into $built (once per lock and Python)" >&2
  rm -rf "$built"
  "$python" -m venv "$built"
  # The SDK's line (./sdk/python) is the checkout's: the Makefile installs it editable.
  grep -v '^\./sdk/python' requirements/runtime.txt >"$built/runtime.txt"
  cp requirements/dev.txt "$built/dev.txt"
  "$built/bin/python" -m pip install --quiet --disable-pip-version-check -r "$built/dev.txt"
  rm "$built/dev.txt" "$built/runtime.txt"
  touch "$built/.complete"
fi
touch "$built" # in use: other keys' venvs unused for a week are removed below

rm -rf "$venv"
if ! cp -al "$built" "$venv" 2>/dev/null; then
  rm -rf "$venv"
  cp -a "$built" "$venv"
fi
rm -f "$venv/.complete"
here=$(cd "$venv" && pwd)
grep -rIl --null -F -- "$built" "$venv/bin" "$venv/pyvenv.cfg" | while IFS= read -r -d '' file; do
  sed "s|$built|$here|g" "$file" >"$file.new"
  chmod --reference="$file" "$file.new"
  mv "$file.new" "$file"
done
exec 9>&-

find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -mtime +7 -exec rm -rf {} +
