#!/usr/bin/env bash
# Trains a lexicon model with lexlip train's lexicon recipe (issue 35: top-K pooling, contrastive
# caption-word grounding, FLOPS per side with warm-up, fixed vocabulary biases; all defaults) on
# the emoji + clip-art corpus with one art style held out (Twemoji: never trained on), then
# evaluates it on the unseen-concept split and the held-out style, with the lexicon figures.
# Killed, it resumes.
#
#   scripts/train-lexicon-model.sh [OUT]          (default OUT: target/emoji-lex-towers)
#   LEXLIP_GPU=1 scripts/train-lexicon-model.sh   (a binary from scripts/build-cuda.sh)
#   STEPS=1500 ...                                (default 1,500 steps of 256 pairs: ~15 epochs)
#
# Time: 7-7.5 minutes on one H200 (887-967 pairs/s measured for this recipe, alone on the card;
# two runs side by side 577 each); days on a 2-core CPU. Needs a release binary (cargo build --release; or $LEXLIP).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/target/emoji-lex-towers}"
holdout_style=twitter
source "$root/scripts/emoji-towers.sh"

train_towers "$train_tsv" \
  --steps "${STEPS:-1500}" --batch-size 256 --lr 5e-4 --text-lr 1e-4 --tau 0.5 \
  --flops-image 0.005 --flops-text 0.005 --seed 42 \
  --checkpoint-every 100 --save-dtype f16 "${gpu[@]}" --out "$out"

cp "$corpus/ATTRIBUTION.md" "$out/ATTRIBUTION.md"
for split in test test-holdout-twitter; do
  "$lexlip" eval --tsv "$corpus/$split.tsv" --model "$out" --max-length 24 --top-k 32,16 \
    "${gpu[@]}" --json > "$out/eval-$split.json"
done
echo "model: $out (unseen concepts: $out/eval-test.json; held-out style: $out/eval-test-holdout-twitter.json)"
