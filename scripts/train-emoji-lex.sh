#!/usr/bin/env bash
# Reproduces models/emoji-lex and emoji-lex-all (retired; docs/models/emoji-lex-all.md): a dense teacher (lexlip's CLIP-style objective, both towers) on the
# emoji + clip-art corpus with one art style held out (Twemoji: never trained on), then lexicon
# heads over it (`--objective heads`: 64 image terms, 32 query terms, caption-word grounding and
# likelihood, distillation from the teacher), then the evaluations the model card reports: the unseen-concept
# split, Noto and Twemoji apart, and the held-out style on seen concepts, sparse and dense.
# Killed, it resumes (each stage checkpoints; a finished stage is skipped).
#
#   scripts/train-emoji-lex.sh [OUT]           (default OUT: target/emoji-lex)
#   EPOCHS=10 DENSE_ARGS="--crop-scale 0.6" …  (the teacher's epochs and extra flags)
#   HOLDOUT_STYLE= HEADS_ARGS="--steps 2000" scripts/train-emoji-lex.sh OUT
#                  (emoji-lex-all: every style, 2,000 heads steps, a fixed shared bias)
#   HEADS_ARGS        the heads' steps and bias (default "--steps 500 --vocab-bias train",
#                     models/emoji-lex's: it was trained before heads honoured --vocab-bias)
#   COMPOSE=N         both stages also train on N pictures composed from the training split's
#                     sources (`lexlip bench compose --split train --seed 7`: 1-4 things per
#                     picture, captioned with what they show), and the model is also evaluated on
#                     2,000 composed pictures of the unseen concepts (eval-compose-test.json).
#                     Needs HOLDOUT_STYLE= (the composed pictures draw on every style).
#                     models/emoji-lex-compose: COMPOSE=40000 HOLDOUT_STYLE= DENSE_ARGS="--steps
#                     6400" HEADS_ARGS="--steps 1500 --vocab-bias fixed" FLOPS="1.0 3.0"
#                     (about 2 hours).
#   ADAPTER=1         puts an ImageNet MobileNetV2 (scripts/fetch-image-backbone.sh) beside the
#                     teacher (`--objective adapter`: its features and the teacher's image
#                     embedding projected onto the teacher's text space) and trains the heads over
#                     that fused model, with 3 augmented views of every picture in the projection's
#                     cache; about 25 more minutes, and encoding a picture costs about 50 times the
#                     teacher's alone (docs/benchmarks.md, "A pretrained image tower").
#   TOWER=DIR         with ADAPTER=1, this MobileNetV2 directory instead of ImageNet's as it
#                     comes: models/emoji-lex-imagenet's tower was trained further on the training
#                     pictures on a GPU (scripts/probe_full_finetune.py, its model card).
#   FLOPS="I T"       the heads' FLOPS weights, image and text (default "0.01 0.01"). The text
#                     side's weight is what keeps a term shared by every caption ("3", "computer")
#                     out of the image lexicons (docs/benchmarks.md, FLOPS weight as a document-frequency
#                     control).
#
# Time on a 2-core CPU: the teacher ~27 minutes alone (10 epochs, 157 pairs/s), the heads ~6
# minutes, the evaluations ~5. Needs a release binary (cargo build --release; or $LEXLIP).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/target/emoji-lex}"
holdout_style="${HOLDOUT_STYLE-twitter}"
if [ -n "${COMPOSE:-}" ] && [ -n "$holdout_style" ]; then
  echo "error: COMPOSE needs HOLDOUT_STYLE= (composed pictures draw on every style)" >&2
  exit 2
fi
source "$root/scripts/emoji-env.sh"
splade="$("$root/scripts/fetch-test-model.sh")"
work="$out.work"
mkdir -p "$work"

if [ -n "${COMPOSE:-}" ]; then
  if [ ! -f "$work/compose/train.tsv" ]; then
    "$lexlip" bench compose --sources "$corpus/images.jsonl" --split train --images "$COMPOSE" \
      --seed 7 --out "$work/compose/shards"
    python3 "$root/scripts/compose_training_tsv.py" --shards "$work/compose/shards" \
      --out "$work/compose" --with "$train_tsv"
  fi
  train_tsv="$work/compose/train.tsv"
  "$lexlip" bench compose --sources "$corpus/images.jsonl" --split test --images 2000 \
    --seed 9 --out "$work/compose-test"
fi

# shellcheck disable=SC2086 # DENSE_ARGS is a list of flags
[ -f "$work/dense/config.json" ] || "$lexlip" train --objective dense \
  --tsv "$train_tsv" --text-init "$splade" \
  --image-config tiny --patch-size 16 --max-length 24 --text-lr 1e-4 --lr 5e-4 --tau 0.05 \
  --batch-size 64 --epochs "${EPOCHS:-10}" --seed 42 --checkpoint-every 400 --save-dtype f16 \
  ${DENSE_ARGS:-} --out "$work/dense"

backbone="$work/dense"
if [ -n "${ADAPTER:-}" ]; then
  tower="${TOWER:-$("$root/scripts/fetch-image-backbone.sh")}"
  [ -f "$work/fused/config.json" ] || "$lexlip" train --objective adapter --backbone "$work/dense" \
    --image-backbone "$tower" --image-views 3 --crop-scale 0.8 --color-jitter 0.3 --hflip \
    --style-augment 0.5 --tsv "$train_tsv" --max-length 24 --seed 42 --save-dtype f16 \
    --out "$work/fused"
  backbone="$work/fused"
fi

read -r flops_image flops_text <<< "${FLOPS:-0.01 0.01}"
# shellcheck disable=SC2086 # HEADS_ARGS is a list of flags
[ -f "$out/lexlip.json" ] || "$lexlip" train --objective heads --backbone "$backbone" \
  --tsv "$train_tsv" --max-length 24 --batch-size 128 ${HEADS_ARGS:---steps 500 --vocab-bias train} \
  --tau 0.5 --lr 1e-2 --flops-image "$flops_image" --flops-text "$flops_text" --grounding 1.0 \
  --caption-words 1 --caption-words-text 0.3 --caption-words-tau 0.3 --seed 42 \
  --save-dtype f16 --cache "$work/cache${ADAPTER:+-fused}" --out "$out"

cp "$corpus/ATTRIBUTION.md" "$out/ATTRIBUTION.md"
splits="test test-google test-twitter"
[ -z "$holdout_style" ] || splits="$splits test-holdout-$holdout_style"
for split in $splits; do
  "$lexlip" eval --tsv "$corpus/$split.tsv" --model "$out" --max-length 24 --json \
    > "$out/eval-$split.json"
  "$lexlip" eval --tsv "$corpus/$split.tsv" --model "$out" --max-length 24 --mode dense --json \
    > "$out/eval-$split-dense.json"
done
if [ -n "${COMPOSE:-}" ]; then
  "$lexlip" eval --webdataset "$work/compose-test" --model "$out" --max-length 24 --json \
    > "$out/eval-compose-test.json"
fi
echo "model: $out (evaluations: $out/eval-*.json; the teacher alone: $work/dense)"
