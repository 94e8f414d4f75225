#!/usr/bin/env bash
# The engine on real learned-sparse vectors, against Seismic, BMP and a brute-force product.
#
#   scripts/bench-real-sparse.sh [WORK_DIR]      (default target/real-sparse)
#
# 1. Corpus: ~244k distinct real English texts — sentences of Debian bookworm's package
#    descriptions (main/i18n/Translation-en.xz from deb.debian.org) and WordNet 3.0 glosses
#    (Debian's wordnet-base) — and 2,000 package synopses not in the corpus as queries
#    (scripts/real_sparse_corpus.py; nothing is committed).
# 2. Both encoded with the real tiny SPLADE model (scripts/fetch-test-model.sh) by
#    `lexlip index --manifest` (documents: ~67 min on 2 cores; resumes if interrupted), then
#    written out with `lexlip export --format jsonl` (integer impacts, lexlip's document order)
#    and indexed again from that file (`lexlip index --vectors`: the searched collection).
# 3. `lexlip bench search` (release build): exhaustive vs exact (block-max, postings) vs
#    approximate (factors, and term cuts at factor 1), one query at a time on one thread (and
#    on 2), with the forward index as each segment plans it (documents layout, block size from
#    the segment's own samples), in three segments and merged into one, and, for comparison, in
#    the terms layout with blocks of 16 and 32 (the layout before the documents layout
#    existed); the exact top 10 is written as a TREC run — the ground truth.
# 4. Document order: the vectors shuffled, indexed with each `--doc-order` (input, clusters,
#    bisection), ingest speed, size and search (WORK_DIR/order-*.json).
# 5. scripts/real_sparse_bench.py on the searched collection's vectors exported in its own
#    document order: scipy brute force, Seismic (pyseismic-lsr 0.5.4) knob sweep, BMP (bmp
#    0.2.8) on lexlip's document order, in a virtualenv under WORK_DIR.
# Results: WORK_DIR/lexlip-*.json, WORK_DIR/others.json (and the tables on stdout).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-target/real-sparse}
mkdir -p "$work"
model=target/test-models/splade-tiny
[ -d "$model" ] || bash scripts/fetch-test-model.sh
# LEXLIP=target/cuda/release/lexlip ENCODE_ARGS=--gpu encodes on a GPU (scripts/build-cuda.sh
# builds that binary): minutes instead of an hour.
cargo build --release -p lexlip-server --bin lexlip
lexlip=${LEXLIP:-target/release/lexlip}
read -r -a encode_args <<< "${ENCODE_ARGS:-}"

if [ ! -s "$work/docs.jsonl" ]; then
    curl -fsSL -o "$work/Translation-en.xz" \
        http://deb.debian.org/debian/dists/bookworm/main/i18n/Translation-en.xz
    (cd "$work" && apt-get download wordnet-base && rm -rf wordnet && mkdir wordnet &&
        dpkg-deb -x wordnet-base_*.deb wordnet)
    python3 scripts/real_sparse_corpus.py "$work/Translation-en.xz" \
        "$work/wordnet/usr/share/wordnet" "$work"
    sha256sum "$work/Translation-en.xz" "$work"/wordnet-base_*.deb > "$work/sources.sha256"
fi

# Encoding is the slow part: once a part's vectors are exported, they are reused as they are.
for part in queries docs; do
    [ -s "$work/$part.export.jsonl" ] || {
        "$lexlip" index --collection "$work/$part-col" --manifest "$work/$part.jsonl" --model "$model" \
            "${encode_args[@]}"
        "$lexlip" export --collection "$work/$part-col" --format jsonl --out "$work/$part.export.jsonl"
    }
done
lexlip=target/release/lexlip
# The searched collection is indexed from the exported vectors (one segment per 100k documents),
# and once more merged into one segment (`--merge-segments`, what a batch build would do).
[ -d "$work/docs-vec" ] ||
    "$lexlip" index --collection "$work/docs-vec" --vectors "$work/docs.export.jsonl" --json
[ -d "$work/docs-vec1" ] ||
    "$lexlip" index --collection "$work/docs-vec1" --vectors "$work/docs.export.jsonl" \
        --merge-segments --json

summary() {
    python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = r["search"]
forward = ", ".join(sorted({f"{f['layout']}/{f['block_size']}" for f in r["forward"]}))
print(f"lexlip, {forward}: {r['docs']} docs, {r['nnz']} non-zeros, "
      f"{r['bytes_per_nnz']:.2f} B/nnz on disk (index structures {r.get('index_bytes_per_nnz', 0):.2f}, of them forward index files {r.get('forward_file_bytes', 0) / r['nnz']:.2f}), "
      f"{r['pruning_memory_bytes'] / r['nnz']:.2f} B/nnz pruning heap (what the files do not hold is built on the heap)")
rows = [("exhaustive", s["exhaustive"]["mean_ms"], 1.0),
        ("exact block-max", s["exact"]["mean_ms"], s["exact"]["recall_at_10"]),
        ("exact postings", s["exact_postings"]["mean_ms"], s["exact_postings"]["recall_at_10"])]
rows += [(f"exact, {t['threads']} threads", t["figures"]["mean_ms"], t["figures"]["recall_at_10"]) for t in s["exact_threads"]]
rows += [(f"term cut {a['term_cut']:.2f}" if a.get("term_cut") else f"approx {a['knob']}",
          a["mean_ms"], a["recall_at_10"]) for a in s["approx"]]
for name, ms, rec in rows:
    print(f"  {name:<18} {ms:7.3f} ms/query  recall@10 {rec:.3f}")
PY
}
# As each segment plans its forward index (the default), in three segments and merged into
# one, then the terms layout with blocks of 16 and 32 for comparison (built on the heap from the
# postings).
for forward in auto merged terms-16 terms-32; do
    collection=$work/docs-vec
    case $forward in
        auto) opts=() ;;
        merged) opts=(); collection=$work/docs-vec1 ;;
        terms-*) opts=(--layout terms --block-size "${forward#terms-}") ;;
    esac
    "$lexlip" bench search --collection "$collection" --queries "$work/queries.export.jsonl" \
        "${opts[@]}" --approx 1.05,1.1,1.2,1.3,1.5,2 --term-cut 0.05,0.1,0.15,0.2 \
        --truth-run "$work/truth.run" \
        --json > "$work/lexlip-$forward.json"
    summary "$work/lexlip-$forward.json"
done

# Document order: the same vectors in a shuffled order, indexed with each --doc-order (one
# segment per 100k documents, as above), exact and approximate search as the segments plan it.
[ -s "$work/docs.shuf.jsonl" ] || shuf --random-source=<(yes) "$work/docs.export.jsonl" > "$work/docs.shuf.jsonl"
for order in input clusters bisection; do
    rm -rf "$work/order-$order"
    "$lexlip" index --collection "$work/order-$order" --vectors "$work/docs.shuf.jsonl" \
        --doc-order "$order" --json > "$work/order-$order.index.json"
    "$lexlip" bench search --collection "$work/order-$order" --queries "$work/queries.export.jsonl" \
        --approx 1.1,1.2 --term-cut 0.1 --json > "$work/order-$order.json"
    python3 - "$work/order-$order.index.json" "$work/order-$order.json" "$order" <<'PY'
import json, sys
i = json.load(open(sys.argv[1])); s = json.load(open(sys.argv[2]))["search"]
approx = "  ".join((f"term cut {a['term_cut']:.2f}" if a.get("term_cut") else f"approx {a['knob']:.1f}")
                   + f" {a['mean_ms']:.3f} ms @ {a['recall_at_10']:.3f}" for a in s["approx"])
print(f"order {sys.argv[3]:<9} ingest {i['items_per_s']:8.0f} docs/s  {i['bytes_per_nnz']:.2f} B/nnz  "
      f"exhaustive {s['exhaustive']['mean_ms']:.3f} ms  exact {s['exact']['mean_ms']:.3f} ms "
      f"(blocks scored {100 * s['exact']['blocks_scored_fraction']:.2f} %)  {approx}")
PY
done

venv=$work/venv
[ -x "$venv/bin/python" ] || {
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q pyseismic-lsr==0.5.4 bmp==0.2.8 scipy numpy
}
# The other engines on the searched collection's vectors, in its document order (for BMP).
[ -s "$work/docs-vec.export.jsonl" ] ||
    "$lexlip" export --collection "$work/docs-vec" --format jsonl --out "$work/docs-vec.export.jsonl"
"$venv/bin/python" scripts/real_sparse_bench.py "$work/docs-vec.export.jsonl" \
    "$work/queries.export.jsonl" "$work/truth.run" "$work/others.json"
