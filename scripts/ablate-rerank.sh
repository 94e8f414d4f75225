#!/usr/bin/env bash
# MaskVLM re-ranker ablation (issue 16) on the emoji corpus: re-rankers trained on top of
# models/emoji-tiny with the same data, steps and seed, each evaluated on the unseen-concept test
# split by re-scoring the lexicon model's first TOP candidates (`lexlip eval --rerank-model`).
# "lexicon" is the first stage alone. Killed, it resumes (each training run resumes from its
# checkpoint; finished arms are skipped).
#
#   scripts/ablate-rerank.sh [OUT]                      (default OUT: target/ablation-rerank)
#   ARMS="full easy" STEPS=1200 TOP=16 scripts/ablate-rerank.sh
#
# Arms: full (ITC + ITM + MLM + MIM, the defaults), itm (ITC + ITM: --rerank-mlm 0
# --rerank-mim 0), easy (ITC + ITM with random negatives only: --rerank-hard 0), all-hard (every
# negative from the lexicon top-16: --rerank-hard 1).
# Writes OUT/ARM/{train.json,eval.json} and OUT/summary.md.
# Needs a release binary (cargo build --release; or $LEXLIP) and the corpus
# (scripts/build-emoji-corpus.sh; $LEXLIP_EMOJI_CORPUS when it exists elsewhere).
set -euo pipefail
source "$(dirname "$0")/ablate-common.sh" ablation-rerank "$@"
arms="${ARMS:-full easy}"
steps="${STEPS:-1200}"
top="${TOP:-16}"

for arm in $arms; do
  dir="$out/$arm"
  extra=()
  case "$arm" in
    full) ;;
    itm) extra=(--rerank-mlm 0 --rerank-mim 0) ;;
    easy) extra=(--rerank-hard 0 --rerank-mlm 0 --rerank-mim 0) ;;
    all-hard) extra=(--rerank-hard 1) ;;
    *) echo "error: unknown arm $arm (full, itm, easy, all-hard)" >&2; exit 2 ;;
  esac
  if [ ! -f "$dir/rerank.json" ] || ! grep -q '"status": "complete"' "$dir/train.json" 2>/dev/null; then
    "$lexlip" train --objective rerank --init "$model" --tsv "$corpus/train.tsv" \
      --max-length 24 --batch-size 32 --steps "$steps" --lr 3e-4 --warmup 0.05 --seed 42 \
      --save-dtype f16 --log-every 50 --checkpoint-every 200 --json "${extra[@]}" \
      --out "$dir" > "$dir.log"
  fi
  [ -f "$dir/eval.json" ] || "$lexlip" eval --tsv "$corpus/test.tsv" --model "$model" \
    --max-length 24 --rerank-model "$dir" --rerank-top "$top" --json > "$dir/eval.json"
done

python3 "$root/scripts/ablation_summary.py" rerank "$out" $arms
