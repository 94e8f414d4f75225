#!/usr/bin/env bash
# Ablation of the seed papers' training options (issue 16) on the emoji corpus, in the shape of
# LexLIP's Table 3. Every arm starts from models/emoji-tiny, fine-tunes its image tower (the text
# tower frozen, which a 2-core CPU can afford) on the same quarter of the training images, for
# the same epochs, steps and seed, and is evaluated on the unseen-concept test split; "start" is
# models/emoji-tiny itself. Killed, it resumes (each run resumes from its checkpoint, finished
# arms are skipped).
#
#   scripts/ablate-seed-methods.sh [OUT]               (default OUT: target/ablation)
#   ARMS="random grouped" EPOCHS=3 FRACTION=0.2 scripts/ablate-seed-methods.sh
#
# Arms: start, random (the baseline), grouped (--sampler grouped, GRIT-VLP), grouped-cons
# (grouped + --itc-consistency 0.2, GRIT-VLP's λ), cons (random + --itc-consistency 0.2),
# grouped-wide (grouped with search spaces of 4,096 pairs), vcl (COOKIE's --image-contrastive
# 1; its text loss needs a trained text tower), shared (COOKIE's weight-sharing layer,
# --shared-layers 1: it trains on both sides, so text→text can move), shared-vcl (both).
# Arms named text-* train the text tower too (no --freeze-text; about half as fast):
# text-random (their baseline), text-mask50 (GRIT-VLP's enlarged masking, --mask-rate 0.5 against
# the default 0.3), text-tcl (COOKIE's --text-contrastive 1).
# Evaluation includes image→image and text→text recall (--single-modal).
# Writes OUT/ARM/{train.json,eval.json} and OUT/summary.md (recall, training time).
# Needs a release binary (cargo build --release; or $LEXLIP) and the corpus
# (scripts/build-emoji-corpus.sh; $LEXLIP_EMOJI_CORPUS when it exists elsewhere).
set -euo pipefail
source "$(dirname "$0")/ablate-common.sh" ablation "$@"
arms="${ARMS:-start random grouped grouped-cons vcl}"
epochs="${EPOCHS:-3}"
fraction="${FRACTION:-0.2}"

# The subset: every caption of a seeded random FRACTION of the training images.
subset="$out/train-subset.tsv"
python3 - "$corpus/train.tsv" "$subset" "$fraction" <<'EOF'
import random, sys
src, dst, fraction = sys.argv[1], sys.argv[2], float(sys.argv[3])
lines = open(src, encoding="utf-8").read().splitlines()
header, rows = lines[0], [l for l in lines[1:] if l]
images = sorted({r.split("\t")[2] for r in rows})
keep = set(random.Random(42).sample(images, round(len(images) * fraction)))
kept = [r for r in rows if r.split("\t")[2] in keep]
with open(dst, "w", encoding="utf-8") as f:
    f.write("\n".join([header] + kept) + "\n")
print(f"subset: {len(keep)} of {len(images)} images, {len(kept)} pairs -> {dst}", file=sys.stderr)
EOF

for arm in $arms; do
  dir="$out/$arm"
  extra=()
  freeze=(--freeze-text)
  case "$arm" in text-*) freeze=() ;; esac
  case "$arm" in
    start) ;;
    random) ;;
    grouped) extra=(--sampler grouped) ;;
    grouped-wide) extra=(--sampler grouped --group-size 4096) ;;
    grouped-cons) extra=(--sampler grouped --itc-consistency 0.2) ;;
    cons) extra=(--itc-consistency 0.2) ;;
    vcl) extra=(--image-contrastive 1) ;;
    shared) extra=(--shared-layers 1) ;;
    shared-vcl) extra=(--shared-layers 1 --image-contrastive 1) ;;
    text-random) ;;
    text-mask50) extra=(--mask-rate 0.5) ;;
    text-tcl) extra=(--text-contrastive 1) ;;
    *) echo "error: unknown arm $arm (start, random, grouped, grouped-wide, grouped-cons, cons, vcl, shared, shared-vcl, text-random, text-mask50, text-tcl)" >&2; exit 1 ;;
  esac
  evaluated="$model"
  if [ "$arm" != start ]; then
    "$lexlip" train --tsv "$subset" --images-root "$corpus" --init "$model" "${freeze[@]}" \
      --max-length 24 --batch-size 32 --epochs "$epochs" --lr 1e-4 --tau 0.5 --seed 42 \
      --checkpoint-every 100 --log-every 50 --save-dtype f16 "${extra[@]}" --out "$dir"
    evaluated="$dir"
  fi
  mkdir -p "$dir"
  eval_single_modal "$dir" "$evaluated"
done

python3 "$root/scripts/ablation_summary.py" seed-methods "$out" $arms
