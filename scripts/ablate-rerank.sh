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
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/target/ablation-rerank}"
arms="${ARMS:-full easy}"
steps="${STEPS:-1200}"
top="${TOP:-16}"
model="$root/models/emoji-tiny"
source "$root/scripts/emoji-env.sh"
mkdir -p "$out"

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

python3 - "$out" $arms <<'EOF'
import json, sys
out, arms = sys.argv[1], sys.argv[2:]
rows = ["| arm | T2I R@1 / R@5 / R@10 | I2T R@1 / R@5 / R@10 | ms per query (T2I / I2T) | training s | pairs/s |",
        "|---|---|---|---|---|---|"]
pct = lambda s, d: " / ".join(f"{100 * s[f'{d}.r@{k}']:.1f}" for k in (1, 5, 10))
first = None
for arm in arms:
    ev = json.load(open(f"{out}/{arm}/eval.json"))["settings"][0]
    tr = json.load(open(f"{out}/{arm}/train.json"))["summary"]
    if first is None:
        first = ev
        rows.append(f"| lexicon (first stage) | {pct(ev, 't2i')} | {pct(ev, 'i2t')} | | | |")
    rows.append(
        f"| {arm} (top {ev['rerank.top']}) | {pct(ev, 'rerank.t2i')} | {pct(ev, 'rerank.i2t')} | "
        f"{ev['rerank.t2i.ms_per_query']:.1f} / {ev['rerank.i2t.ms_per_query']:.1f} | "
        f"{tr['seconds']:.0f} | {tr['samples_per_s']:.1f} |")
open(f"{out}/summary.md", "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
EOF
