#!/usr/bin/env bash
# Expansion control on the query side (issue 73), measured at inference: one model, its text
# lexicons cut to their own content words and at most E other terms (`--query-expansion E`),
# for each E, against the model as it ships (every term its head keeps). Each split is
# evaluated both ways, so the captions' lexicons as documents (image → text) are measured
# with the same rule as the queries.
#
#   scripts/ablate-query-expansion.sh [OUT]          (default OUT: target/ablation-query-expansion)
#   MODEL=models/emoji-lex-imagenet E_VALUES="0 4 8 16" SPLITS="test test-twitter" \
#     MANIFEST=lexlip-demo/emoji/manifest.jsonl scripts/ablate-query-expansion.sh
#
# SPLITS name TSVs of the emoji corpus; MANIFEST, when set, adds the demo's collection (one
# CLDR label per emoji, written by `lexlip demo`). Writes OUT/SPLIT/{full,eE}.json and prints
# a table: T2I / I2T R@1 and R@10, query non-zeros (median), texts whose own words lead.
# Needs a release binary (cargo build --release; or $LEXLIP) and the corpus
# (scripts/build-emoji-corpus.sh; $LEXLIP_EMOJI_CORPUS when it exists elsewhere).
set -euo pipefail
source "$(dirname "$0")/ablate-common.sh" ablation-query-expansion "$@"
model="${MODEL:-$root/models/emoji-lex-imagenet}"
e_values="${E_VALUES:-0 4 8 16}"
splits="${SPLITS:-test}"

run() { # NAME ARM ARGS...: one evaluation, skipped when its JSON exists
  local name="$1" arm="$2"
  shift 2
  mkdir -p "$out/$name"
  local json="$out/$name/$arm.json"
  [ -s "$json" ] && return 0
  "$lexlip" eval --model "$model" --max-length 24 --json "$@" > "$json.tmp"
  mv "$json.tmp" "$json"
}

inputs=()
for split in $splits; do inputs+=("$split=--tsv=$corpus/$split.tsv"); done
[ -n "${MANIFEST:-}" ] && inputs+=("demo=--manifest=$MANIFEST")
for input in "${inputs[@]}"; do
  name="${input%%=*}"
  arg="${input#*=}"
  run "$name" full "$arg"
  for e in $e_values; do run "$name" "e$e" "$arg" --query-expansion "$e"; done
done

python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("| split | query terms | T2I R@1 / R@10 | I2T R@1 / R@10 | query non-zeros (median) | own words lead |")
print("|---|---|---|---|---|---|")
for split in sorted(p for p in out.iterdir() if p.is_dir()):
    arms = sorted(split.glob("*.json"), key=lambda p: (p.stem != "full", int(p.stem[1:]) if p.stem != "full" else 0))
    for arm in arms:
        r = json.loads(arm.read_text())
        s, lex = r["settings"][0], r["lexicon"]
        name = "as shipped" if arm.stem == "full" else f"own + {arm.stem[1:]}"
        print(f"| {split.name} | {name} | {100*s['t2i.r@1']:.1f} / {100*s['t2i.r@10']:.1f} % | "
              f"{100*s['i2t.r@1']:.1f} / {100*s['i2t.r@10']:.1f} % | {lex['text']['nnz_median']:.0f} | "
              f"{100*lex['text_own_words_first']:.1f} % |")
PY
