#!/usr/bin/env bash
# Fetches real colour photos that ship in the PyPI wheel scikit-image==0.26.0 (skimage/data/),
# pinned by the wheel's SHA-256, into the folder skimage/ of a cache directory (default:
# target/test-photos; $LEXLIP_TEST_MODEL_CACHE). The preprocessing parity test
# (model/tests/preprocess_photos.rs) resizes them as Pillow and torchvision do. Photo sites are
# not reachable from CI; PyPI is. Photos are never committed. Prints the photo directory.
#
# The wheel is the cp312 manylinux x86_64 one whatever the host (the photos are the same in every
# wheel; one pinned file keeps the hash meaningful). No Python package is installed.
#
# Licences, from the docstrings of skimage/data/_fetchers.py (skimage/data/README.txt has none):
#   astronaut.png          512 × 512  Eileen Collins, NASA Great Images database: no known
#                                     copyright restrictions, public domain.
#   chelsea.png            451 × 300  Chelsea the cat: CC0 by the photographer (Stefan van der Walt).
#   coffee.png             600 × 400  Coffee cup, courtesy of Pikolo Espresso Bar: CC0 by the
#                                     photographer (Rachel Michetti).
#   rocket.jpg             640 × 427  DSCOVR launch on Falcon 9, SpaceX: released into the public
#                                     domain by SpaceX.
#   hubble_deep_field.jpg 1000 × 872  Hubble eXtreme Deep Field, NASA (HubbleSite): public domain.
# All are RGB without transparency (lexlip composites alpha over white where PIL's
# convert("RGB") drops it, so a photo with alpha would not compare like for like).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${LEXLIP_TEST_MODEL_CACHE:-$root/target/test-photos}"
dest="$cache/skimage"
photos=(astronaut.png chelsea.png coffee.png rocket.jpg hubble_deep_field.jpg)
wheel_name="scikit_image-0.26.0-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl"
wheel_sha256="7df650e79031634ac90b11e64a9eedaf5a5e06fcd09bcd03a34be01745744466"
source "$root/scripts/pinned-wheel.sh"
fetch_cached "$dest" "${photos[@]}"
fetch_workdir "$cache"
wheel="$(pinned_wheel "$tmp" "$wheel_name" "$wheel_sha256" --platform manylinux_2_28_x86_64 \
  --python-version 3.12 --implementation cp --abi cp312 scikit-image==0.26.0)"
mkdir -p "$tmp/out"
python3 - "$wheel" "$tmp/out" "${photos[@]}" <<'PY'
import sys, zipfile
wheel, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    for name in names:
        with open(f"{out}/{name}", "wb") as f:
            f.write(z.read(f"skimage/data/{name}"))
PY
fetch_done "$dest"
