#!/usr/bin/env bash
# The engine on the 1M synthetic topical corpus of `lexlip bench engine`, against Seismic and a
# brute-force product on the same vectors and queries.
#
#   scripts/bench-synthetic-sparse.sh [WORK_DIR]      (default target/synth-bench)
#
# 1. `lexlip bench engine --dir WORK_DIR/col --write-queries WORK_DIR/queries.jsonl`: generates
#    and indexes DOCS documents (default 1,000,000, seed 42), measures, and keeps the collection
#    and the QUERIES queries it searched (default 200).
# 2. `lexlip bench search` on that collection with those queries (release build, one query at a
#    time on one thread; every query run once unmeasured first): exhaustive vs exact vs
#    approximate (factors, and term cuts at factor 1); the exact top 10 is written as a TREC run,
#    the ground truth for the other engines.
# 3. The collection exported (`lexlip export --format jsonl`, its document order) and searched by
#    scripts/real_sparse_bench.py (SYSTEMS, default scipy,seismic: the scipy brute force and
#    Seismic's knob sweep, pyseismic-lsr 0.5.4, lists of 2,000 and 5,000 postings; add bmp for
#    BMP 0.2.8 on lexlip's document order) in a virtualenv (VENV, default WORK_DIR/venv).
# 4. `lexlip bench search` again, so that lexlip's figures come from both sides of the others'.
# Results: WORK_DIR/lexlip-engine.json, lexlip-1.json, lexlip-2.json, others.json (and tables on
# stdout). About 25 minutes on 2 cores, most of it Seismic's two builds.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-target/synth-bench}
docs=${DOCS:-1000000}
queries=${QUERIES:-200}
mkdir -p "$work"
cargo build --release -p lexlip-server --bin lexlip
lexlip=${LEXLIP:-target/release/lexlip}
sweep=(--approx 1.05,1.1,1.25 --term-cut 0.05,0.1,0.15,0.2,0.3 --threads 2)

rm -rf "$work/col"
"$lexlip" bench engine --docs "$docs" --queries "$queries" --seed 42 "${sweep[@]}" \
    --dir "$work/col" --write-queries "$work/queries.jsonl" --json > "$work/lexlip-engine.json"

summary() {
    python3 - "$1" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["search"]
e = s["exhaustive"]["mean_ms"]
print(f"exhaustive {e:.3f} ms  exact {s['exact']['mean_ms']:.3f} ms ({e / s['exact']['mean_ms']:.2f}x)")
for a in s["approx"]:
    name = f"term cut {a['term_cut']:.2f}" if a.get("term_cut") else f"approx {a['knob']:.2f}"
    print(f"  {name:<14} {a['mean_ms']:.3f} ms @ recall {a['recall_at_10']:.4f} ({a['speedup']:.2f}x)")
PY
}

"$lexlip" bench search --collection "$work/col" --queries "$work/queries.jsonl" "${sweep[@]}" \
    --truth-run "$work/truth.run" --json > "$work/lexlip-1.json"
summary "$work/lexlip-1.json"

venv=${VENV:-$work/venv}
[ -x "$venv/bin/python" ] || {
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q pyseismic-lsr==0.5.4 bmp==0.2.8 scipy numpy
}
"$lexlip" export --collection "$work/col" --format jsonl --out "$work/docs.export.jsonl"
"$venv/bin/python" scripts/real_sparse_bench.py "$work/docs.export.jsonl" "$work/queries.jsonl" \
    "$work/truth.run" "$work/others.json" --systems "${SYSTEMS:-scipy,seismic}" \
    --seismic-n-postings 2000,5000

"$lexlip" bench search --collection "$work/col" --queries "$work/queries.jsonl" "${sweep[@]}" \
    --json > "$work/lexlip-2.json"
summary "$work/lexlip-2.json"
