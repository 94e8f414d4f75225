#!/usr/bin/env bash
# Builds lexlip's emoji + clip-art image-text corpus (LexLIP/ViLT TSV) from pinned registry
# packages: Noto and Twemoji emoji PNGs (npm emoji-datasource-*), CLDR labels and tags (npm
# emojibase-data) and Open Clip Art Library PNGs with their SVG metadata (Debian openclipart-*).
# See docs/data.md for the layout, captions, splits and licences.
#
#   scripts/build-emoji-corpus.sh [--out DIR | DIR] [--cache DIR] [--clipart-size N]
#                                 [--test-percent P] [--holdout-style STYLE]... [--workers N]
#                                 [--colour-words]
#
# --colour-words adds a caption naming the colour of each mostly one-colour picture ("red
# automobile"; scripts/emoji_colours.py).
#
# Downloads go to the cache (default target/data-cache, or $LEXLIP_DATA_CACHE) and are reused;
# the corpus goes to --out (default target/data/emoji-corpus). Same inputs, same output.
# ----
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${LEXLIP_DATA_CACHE:-$root/target/data-cache}"
out="$root/target/data/emoji-corpus"
py_args=()
usage() { sed -n '2,/^# ----$/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
out_given=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a directory}"; out_given=1; shift 2 ;;
    --cache) cache="${2:?--cache needs a directory}"; shift 2 ;;
    --clipart-size|--test-percent|--holdout-style|--workers)
      py_args+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
    --colour-words) py_args+=("$1"); shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "error: unknown option $1" >&2; usage >&2; exit 2 ;;
    *)
      # One directory without --out is the output directory.
      [ -z "$out_given" ] || { echo "error: unexpected argument $1 (the output is $out)" >&2; usage >&2; exit 2; }
      out="$1"; out_given=1; shift ;;
  esac
done

# Pinned inputs: name, version, sha256 of the downloaded file.
NPM_PKGS=(
  "emoji-datasource-google 16.0.0 fb5fd131b362aab7a55542d2a147a79708cce0a8b1c1bbacd470172708b5c438"
  "emoji-datasource-twitter 16.0.0 f64a530c63bca463bd8317fdc4615ce63a53a0c65018e4ce2d848aaba7a28877"
  "emojibase-data 17.0.0 d01d0e2ca4e22cb402679532155342c71e2e871f25c32223c013b8b166ebdf5a"
)
DEB_PKGS=(
  "openclipart-png 1:0.18+dfsg-19 f07f1545a2970c2cf3fa339bc2405da1a95cf2b1827bfa05bf73eb1c20291c02"
  "openclipart-svg 1:0.18+dfsg-19 989712d90d57dfa3230049f553bb43b76c30ee4d4b8c5f6e106e33f7db5cbdc5"
)
PILLOW_VERSION=11.3.0

die() { echo "error: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null || die "$1 is not installed ($2)"; }
need python3 "the corpus builder is Python"
need npm "npm pack fetches the emoji packages"
need apt-get "apt-get download fetches the clip-art packages"
need dpkg "dpkg -x unpacks the clip-art packages"
need sha256sum "downloads are checked against pinned checksums"

mkdir -p "$cache/downloads" "$cache/src" "$out"
cache="$(cd "$cache" && pwd)"
out="$(cd "$out" && pwd)"
work="$(mktemp -d "$cache/tmp.XXXXXX")"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work" # apt-get download hands the fetch to the unprivileged _apt user

check_sha() { # file sha256
  local got
  got="$(sha256sum "$1" | cut -d' ' -f1)"
  [ "$got" = "$2" ] || die "$1: sha256 $got, expected $2 (a changed upstream file; delete it to refetch)"
}

# fetch_npm NAME VERSION SHA256 PATH...: downloads NAME@VERSION, unpacks PATHs (inside package/)
# into $cache/src/NAME-VERSION. Prints nothing; dies with the reason.
fetch_npm() {
  local name="$1" version="$2" sha="$3"; shift 3
  local tgz="$cache/downloads/$name-$version.tgz" dest="$cache/src/$name-$version"
  if [ ! -f "$tgz" ]; then
    echo "fetching npm $name@$version" >&2
    mkdir -p "$work/npm"
    (cd "$work/npm" && npm pack --loglevel=error "$name@$version" >"$work/npm.log" 2>&1) || {
      grep -v 'Unknown user config' "$work/npm.log" >&2 || true
      die "could not fetch npm package $name@$version: is the npm registry reachable?"
    }
    mv "$work/npm/$name-$version.tgz" "$tgz"
  fi
  check_sha "$tgz" "$sha"
  if [ ! -f "$dest/.complete" ]; then
    rm -rf "$dest" "$work/x"
    mkdir -p "$work/x"
    tar -xzf "$tgz" -C "$work/x" "${@/#/package/}" || die "$tgz: could not unpack $*"
    mv "$work/x/package" "$dest"
    touch "$dest/.complete"
  fi
  unpacked[$name]="$dest"
}

apt_updated=0
declare -A unpacked # package name → its unpacked directory
# fetch_deb NAME VERSION SHA256: downloads the .deb, unpacks it into $cache/src/NAME-VERSION.
fetch_deb() {
  local name="$1" version="$2" sha="$3"
  local deb="$cache/downloads/${name}_${version/:/%3a}_all.deb" dest="$cache/src/$name-${version/:/_}"
  if [ ! -f "$deb" ]; then
    echo "fetching Debian $name=$version" >&2
    if ! apt-cache show "$name=$version" >/dev/null 2>&1 && [ "$apt_updated" = 0 ] \
      && [ "$(id -u)" = 0 ]; then
      echo "apt-get update (the package lists do not know $name=$version)" >&2
      apt-get update -qq >&2 || die "apt-get update failed: is the Debian archive reachable?"
      apt_updated=1
    fi
    mkdir -p "$work/deb"
    # apt-get download runs as root here; chmod lets its unprivileged fetcher write.
    chmod 777 "$work/deb"
    (cd "$work/deb" && apt-get download -q "$name=$version" >"$work/apt.log" 2>&1) || {
      cat "$work/apt.log" >&2
      die "could not fetch Debian package $name=$version: is the Debian archive reachable (and 'apt-get update' done)?"
    }
    mv "$work/deb/"*.deb "$deb"
  fi
  check_sha "$deb" "$sha"
  if [ ! -f "$dest/.complete" ]; then
    rm -rf "$dest"
    dpkg -x "$deb" "$work/x-$name" || die "$deb: dpkg -x failed"
    mv "$work/x-$name" "$dest"
    touch "$dest/.complete"
  fi
  unpacked[$name]="$dest"
}

for spec in "${NPM_PKGS[@]}"; do
  read -r name version sha <<<"$spec"
  case "$name" in
    emoji-datasource-*)
      style="${name#emoji-datasource-}"
      fetch_npm "$name" "$version" "$sha" "img/$style/64" emoji.json LICENSE README.md package.json ;;
    emojibase-data) fetch_npm "$name" "$version" "$sha" en LICENSE README.md package.json ;;
  esac
done
for spec in "${DEB_PKGS[@]}"; do
  read -r name version sha <<<"$spec"
  fetch_deb "$name" "$version" "$sha"
done

# Pillow, pinned, in a directory of its own (nothing installed system-wide).
pylib="$cache/pillow-$PILLOW_VERSION"
if [ ! -f "$pylib/.complete" ]; then
  echo "installing Pillow==$PILLOW_VERSION into $pylib" >&2
  rm -rf "$pylib"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$pylib" \
    "Pillow==$PILLOW_VERSION" >&2 || die "could not install Pillow==$PILLOW_VERSION: is PyPI reachable?"
  touch "$pylib/.complete"
fi

PYTHONPATH="$pylib${PYTHONPATH:+:$PYTHONPATH}" python3 "$root/scripts/build_emoji_corpus.py" \
  --google "${unpacked[emoji-datasource-google]}" \
  --twitter "${unpacked[emoji-datasource-twitter]}" \
  --emojibase "${unpacked[emojibase-data]}" \
  --clipart-png "${unpacked[openclipart-png]}/usr/share/openclipart/png" \
  --clipart-svg "${unpacked[openclipart-svg]}/usr/share/openclipart/svg" \
  --out "$out" "${py_args[@]}"

# Licences and attribution.
lic="$out/LICENSES"
rm -rf "$lic"
mkdir -p "$lic"
cp "${unpacked[emoji-datasource-google]}/LICENSE" "$lic/emoji-datasource-MIT.txt"
cp "${unpacked[emojibase-data]}/LICENSE" "$lic/emojibase-data-MIT.txt"
cp "${unpacked[openclipart-png]}/usr/share/doc/openclipart-png/copyright" \
  "$lic/openclipart-public-domain.txt"
if [ -f /usr/share/common-licenses/Apache-2.0 ]; then
  cp /usr/share/common-licenses/Apache-2.0 "$lic/Apache-2.0.txt"
else
  echo "Apache License 2.0: https://www.apache.org/licenses/LICENSE-2.0" >"$lic/Apache-2.0.txt"
fi
cat >"$lic/CC-BY-4.0.txt" <<'EOF'
Creative Commons Attribution 4.0 International (CC BY 4.0)
Legal code: https://creativecommons.org/licenses/by/4.0/legalcode
Summary:    https://creativecommons.org/licenses/by/4.0/
EOF
{
  echo "# Attribution"
  echo
  echo "This corpus was generated by lexlip's scripts/build-emoji-corpus.sh from these packages"
  echo "(file sha256 in brackets):"
  echo
  for spec in "${NPM_PKGS[@]}"; do read -r n v s <<<"$spec"; echo "- npm \`$n@$v\` [$s]"; done
  for spec in "${DEB_PKGS[@]}"; do read -r n v s <<<"$spec"; echo "- Debian \`$n=$v\` [$s]"; done
  cat <<'EOF'

Changes made: every image was composited on a white background and saved as an RGB PNG;
clip art was also cropped to its drawing, scaled to fit a square and centred. Captions were written from the metadata
named below.

## images/google/ — Noto Emoji (Google)
Noto Emoji images (v2.048, as packaged by emoji-datasource-google), Copyright Google Inc.,
licensed under the Apache License 2.0 (LICENSES/Apache-2.0.txt). Noto Emoji states that its
flag images (third_party/region-flags) are in the public domain or otherwise exempt from
copyright.

## images/twitter/ — Twemoji
Twemoji graphics (v16.0.1, the fork maintained by jdecked, as packaged by
emoji-datasource-twitter), Copyright Twitter, Inc. (now X Corp.) and other contributors,
and jdecked and other contributors. Licensed under CC BY 4.0
(https://creativecommons.org/licenses/by/4.0/, LICENSES/CC-BY-4.0.txt). Changes as above.

## Emoji labels, tags, groups (captions of images/google/ and images/twitter/)
emojibase-data by Miles Johnson, MIT licence (LICENSES/emojibase-data-MIT.txt); the labels and
tags are Unicode CLDR annotations. Unicode character names and the image packaging come from
emoji-datasource by Cal Henderson (iamcal), MIT licence (LICENSES/emoji-datasource-MIT.txt).

## images/openclipart/ — Open Clip Art Library
Clip art from the Open Clip Art Library 0.18 as packaged by Debian (openclipart-png; titles,
keywords, descriptions and authors from openclipart-svg), dedicated to the public domain by
their authors (LICENSES/openclipart-public-domain.txt). Each image's author is in
images.jsonl (field "creator").

The Apple and Facebook emoji sets of emoji-datasource are not used (not freely licensed).
EOF
} >"$out/ATTRIBUTION.md"
echo "corpus: $out"
