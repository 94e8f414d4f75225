#!/usr/bin/env bash
# Ablation of ConLIP's options for the dense objective (issue 16) on the emoji corpus, in the
# shape of ConLIP's Table 3: every arm trains a dense dual encoder whose towers start from
# models/emoji-tiny's (projections random), on the same training pairs, for the same epochs,
# steps and seed, and is evaluated through the dense index on the unseen-concept test split,
# image→image and text→text included. Killed, it resumes (each run resumes from its checkpoint,
# finished arms are skipped).
#
#   scripts/ablate-dense.sh [OUT]                       (default OUT: target/ablation-dense)
#   ARMS="cl conditioned" EPOCHS=1 scripts/ablate-dense.sh
#
# Arms: infonce (CLIP's in-batch InfoNCE, the dense baseline), cl (ConLIP's contrastive part
# alone: --dense-loss dcl --dense-momentum), vanilla (cl + --dense-token vanilla: masked text and
# image modelling against the other side's complete states), conditioned (cl + --dense-token
# conditioned: ConMLM and ConMIM), cookie (infonce + COOKIE's --image-contrastive 1
# --text-contrastive 1, which need trained towers). ConLIP's masking rates (15 % of tokens, 50 % of patches) in
# every arm; they only act where a token objective is on.
# Writes OUT/ARM/{train.json,eval.json} and OUT/summary.md (recall, training time).
# Needs a release binary (cargo build --release; or $LEXLIP) and the corpus
# (scripts/build-emoji-corpus.sh; $LEXLIP_EMOJI_CORPUS when it exists elsewhere).
set -euo pipefail
source "$(dirname "$0")/ablate-common.sh" ablation-dense "$@"
arms="${ARMS:-infonce cl vanilla conditioned}"
epochs="${EPOCHS:-1}"

for arm in $arms; do
  dir="$out/$arm"
  cl=(--dense-loss dcl --dense-momentum)
  case "$arm" in
    infonce) extra=() ;;
    cl) extra=("${cl[@]}") ;;
    vanilla) extra=("${cl[@]}" --dense-token vanilla) ;;
    conditioned) extra=("${cl[@]}" --dense-token conditioned) ;;
    cookie) extra=(--image-contrastive 1 --text-contrastive 1) ;;
    *) echo "error: unknown arm $arm (infonce, cl, vanilla, conditioned, cookie)" >&2; exit 1 ;;
  esac
  "$lexlip" train --tsv "$corpus/train.tsv" --images-root "$corpus" --init "$model" \
    --objective dense --max-length 24 --batch-size 32 --epochs "$epochs" --lr 2e-4 \
    --text-lr 5e-5 --tau 0.05 --mask-rate 0.15 --image-mask-rate 0.5 --seed 42 \
    --checkpoint-every 100 --log-every 50 --save-dtype f16 "${extra[@]}" --out "$dir"
  eval_single_modal "$dir" "$dir" --mode dense
done

python3 "$root/scripts/ablation_summary.py" dense "$out" $arms
