#!/usr/bin/env bash
# The image workload of LexLIP's Table 2 on lexlip's own models (issue 38): N pictures composed
# from the emoji + clip-art sources (`lexlip bench compose`, WebDataset shards, deterministic
# from the seed), then for every lexicon model under models/ and the dense baseline
# (models/emoji-dense, or --dense-model DIR):
#
#   - batch indexing, end to end: `lexlip index --webdataset` (decode, encode, index), its
#     images/s, peak RSS and wall time (the time to a searchable collection);
#   - text→image over the N pictures and image→text over their N captions (`lexlip eval
#     --collection` of the indexed collection: its vectors are read back, not encoded again;
#     `--relevance caption`: the composed pictures repeat captions, so any picture of the
#     query's caption answers it, and each caption is asked once): R@1/10 and single-thread QPS for the sparse exact search, approximate settings (factors
#     1.2, 1.5, 2, of which sparse_approx is the fastest that finds 95 % of the exact first 10,
#     with its factor in `approx`; term cut 0.1) and top-K 64/32/16/8 collections; the dense
#     model's exact scan and HNSW graph on the same items;
#   - LexLIP's Table 2 itself: the emoji corpus's held-out single pictures (`test.tsv`, concepts
#     no model trained on) searched among the N pictures and their captions, which answer
#     nothing (`lexlip eval --tsv test.tsv --distractors`, caption rule): the same settings'
#     R@1/10 and QPS on queries the models can answer;
#   - bytes per item: the vectors of an image-only collection (sparse: postings, term dictionary,
#     forward file; dense: the f32 vectors);
#   - serving the indexed collection with `lexlip serve` (scripts/serve_probe.py): the time until
#     it is ready and until the first text→image search answers (for the dense baseline, the
#     time until the dense path answers after a restart), the mean latency of 200 searches over
#     HTTP, and the server's resident memory after them (heap and mapped index files apart).
#
#   scripts/bench-image-workload.sh [--images N] [--json FILE] [--dense-model DIR] [--gpu]
#                                   [--seed S] [--size PX] [--work DIR] [--models DIR...]
#                                   [--max-queries Q] [--idf ALPHA]
#
# Defaults: --images 1000000, --seed 0, --size 224, --work target/image-workload, every model
# directory under models/, --max-queries 2000 (queries per direction, spread evenly over the N
# pictures and N captions; every item stays in the collections), --idf 2 (the IDF exponent of
# the sparse_idf settings; models/emoji-lex-compose's card recommends 2 at a million pictures). JSON keys: images, relevance ("caption"), and per model: index.images_per_s,
# index.peak_rss_mb, index.seconds, t2i|i2t.{sparse_exact,sparse_approx,sparse_cut,sparse_top64,
# sparse_top32,sparse_top16,sparse_top8,sparse_idf,sparse_idf_top16,sparse_idf_top16_approx,
# dense_exact,dense_hnsw}.{qps,r@1,r@10,queries} (sparse_idf: the exact search with queries
# weighted by IDF, `lexlip eval --idf`; sparse_idf_top16_approx: the fastest factor (1.2, 1.5)
# or term cut (0.1) over the top-16 collection with IDF that finds 95 % of its exact first 10,
# with `approx` and `term_cut`; and overlap@10, the share of an exact search's first 10 found,
# beside every setting but the exact full ones: approximate ones against the exact search of
# the same documents, top-K ones against sparse_exact (sparse_idf_top16 against sparse_idf),
# dense_hnsw against dense_exact), the same under heldout (the held-out pictures among the N),
# bytes_per_item.{sparse,dense}; dense_index.{images_per_s,peak_rss_mb,seconds} (the dense
# baseline through `lexlip index`, its graph build timed by `lexlip eval --hnsw`); serve.{ready_s,
# first_answer_s,ms_per_query,rss_mb,rss_anon_mb,rss_file_mb} per model and for dense_index. A
# dense entry is null when there is no dense model.
# --images 20000 takes about 11 minutes on a 2-core CPU with the five shipped models (2026-11-30).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
lexlip="${LEXLIP:-$root/target/release/lexlip}"
images=1000000 seed=0 size=224 json="" dense="" gpu=() work="$root/target/image-workload"
max_queries=2000 idf=2
models=()
while [ $# -gt 0 ]; do
  case "$1" in
    --images) images="$2"; shift 2 ;;
    --json) json="$2"; shift 2 ;;
    --dense-model) dense="$2"; shift 2 ;;
    --gpu) gpu=(--gpu); shift ;;
    --seed) seed="$2"; shift 2 ;;
    --size) size="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --max-queries) max_queries="$2"; shift 2 ;;
    --idf) idf="$2"; shift 2 ;;
    --models) shift; while [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; do models+=("$1"); shift; done ;;
    -h|--help) sed -n '2,48p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$lexlip" ] || { echo "error: no lexlip binary at $lexlip: run cargo build --release or set LEXLIP" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "error: /usr/bin/time is needed for peak memory (Debian: apt-get install time)" >&2; exit 1; }
[ "$images" -ge 1 ] 2>/dev/null || { echo "error: --images must be a positive number, got $images" >&2; exit 2; }
if [ "${#models[@]}" -eq 0 ]; then
  for m in "$root"/models/*/; do [ -f "$m/lexlip.json" ] && models+=("${m%/}"); done
fi
[ -n "$dense" ] || [ ! -f "$root/models/emoji-dense/config.json" ] || dense="$root/models/emoji-dense"
[ -z "$dense" ] || [ -d "$dense" ] || { echo "error: --dense-model $dense is no directory" >&2; exit 2; }
corpus="${LEXLIP_EMOJI_CORPUS:-$root/target/data/emoji-corpus}"
[ -f "$corpus/images.jsonl" ] || "$root/scripts/build-emoji-corpus.sh" --out "$corpus"

mkdir -p "$work"
shards="$work/shards-$images-$seed-$size"
if [ ! -f "$shards/.done" ]; then
  rm -rf "$shards"
  "$lexlip" bench compose --sources "$corpus/images.jsonl" --images "$images" --seed "$seed" \
    --size "$size" --out "$shards"
  touch "$shards/.done"
fi

results="$work/results-$images-$seed-$size"
mkdir -p "$results"
# Text queries for the server: the first captions of the first shard.
captions="$results/captions.txt"
[ -s "$captions" ] || python3 - "$shards" "$captions" <<'EOF'
import glob, sys, tarfile
out = []
with tarfile.open(sorted(glob.glob(sys.argv[1] + "/*.tar"))[0]) as shard:
    for member in shard:
        if member.name.endswith(".txt") and len(out) < 200:
            out.append(" ".join(shard.extractfile(member).read().decode().split()))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
EOF
run_model() { # name model-dir mode
  local name="$1" model="$2" mode="$3" out="$results/$1"
  rm -rf "$out"
  mkdir -p "$out"
  # A dense-only model's `lexlip index` keeps its vectors (no lexicons).
  echo "== $name: index" >&2
  rm -rf "$out/collection"
  /usr/bin/time -f '%e %M' -o "$out/index.time" "$lexlip" index --collection "$out/collection" \
    --webdataset "$shards" --model "$model" "${gpu[@]}" > "$out/index.log" 2>&1 ||
    { echo "error: lexlip index failed, see $out/index.log" >&2; exit 1; }
  echo "== $name: serve" >&2
  python3 "$root/scripts/serve_probe.py" "$lexlip" "$out/collection" "$model" "$mode" \
    "$captions" > "$out/serve.json" ||
    { echo "error: serving the collection failed" >&2; exit 1; }
  echo "== $name: eval" >&2
  # The collection's own vectors: what was indexed is evaluated without encoding it again.
  local eval_args=(eval --collection "$out/collection" --model "$model" --json --work-dir "$work"
    --max-queries "$max_queries" --relevance caption)
  if [ "$mode" = dense ]; then
    eval_args+=(--mode dense --hnsw)
  else
    eval_args+=(--approx 1.2,1.5,2 --term-cut 0.1 --top-k 64,32,16,8)
  fi
  "$lexlip" "${eval_args[@]}" "${gpu[@]}" > "$out/eval.json"
  # The IDF evaluations of a sparse model, on the N and on the held-out pictures among them.
  local idf_args=(--idf "$idf" --top-k 16 --approx 1.2,1.5 --term-cut 0.1)
  if [ "$mode" = sparse ]; then
    # The same queries weighted by their terms' IDF among the N (`--idf`).
    "$lexlip" eval --collection "$out/collection" --model "$model" --json --work-dir "$work" \
      --max-queries "$max_queries" --relevance caption "${idf_args[@]}" "${gpu[@]}" > "$out/eval-idf.json"
  fi
  echo "== $name: held-out pictures among the collection" >&2
  # LexLIP's Table 2: a test set (the emoji corpus's unseen concepts, single pictures) searched
  # among the N pictures and captions, which answer nothing.
  local heldout_args=(eval --tsv "$corpus/test.tsv" --distractors "$out/collection"
    --model "$model" --json --work-dir "$work" --relevance caption)
  if [ "$mode" = dense ]; then
    heldout_args+=(--mode dense --hnsw)
  else
    heldout_args+=(--approx 1.2,1.5,2 --term-cut 0.1 --top-k 64,16)
  fi
  "$lexlip" "${heldout_args[@]}" "${gpu[@]}" > "$out/heldout.json"
  if [ "$mode" = sparse ]; then
    "$lexlip" eval --tsv "$corpus/test.tsv" --distractors "$out/collection" --model "$model" --json \
      --work-dir "$work" --relevance caption "${idf_args[@]}" "${gpu[@]}" > "$out/heldout-idf.json"
  fi
  rm -rf "$out/collection"
}

for m in "${models[@]}"; do run_model "$(basename "$m")" "$m" sparse; done
[ -z "$dense" ] || run_model "dense-baseline" "$dense" dense

python3 - "$results" "$images" "$json" "$dense" "${models[@]}" <<'EOF'
import json, os, sys
results, images, out, dense_model, models = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]

def load(name):
    d = os.path.join(results, name)
    if not os.path.isdir(d):
        return None, None
    timed = os.path.join(d, "index.time")
    index = None
    if os.path.isfile(timed):
        seconds, rss_kb = open(timed).read().split()[-2:]
        index = (float(seconds), int(rss_kb))
    return index, json.load(open(os.path.join(d, "eval.json")))

def settings_in(name, file="heldout.json"):
    # The settings of one of a model's evaluations (by default the held-out pictures').
    f = os.path.join(results, name, file)
    return json.load(open(f))["settings"] if os.path.isfile(f) else []

def weighted(name, file):
    # The `--idf` evaluation of a sparse model: its full and top-16 settings, exact.
    ss = settings_in(name, file)
    return ss, {"sparse_idf": pick(ss, search="exact", top_k=None),
                "sparse_idf_top16": pick(ss, search="exact", top_k=16)}

def add(entry, weighted_run):
    ss, rows = weighted_run
    for d in ("t2i", "i2t"):
        for k, s in rows.items():
            entry[f"{d}.{k}"] = figures(s, d)
        # The fastest approximate search of the top-16 collection (a factor or a term cut)
        # that finds 95 % of its exact first 10.
        entry[f"{d}.sparse_idf_top16_approx"] = fastest_kept(ss, d, top_k=16)

def served(name):
    f = os.path.join(results, name, "serve.json")
    return json.load(open(f)) if os.path.isfile(f) else None

def same(a, b):
    # Factors come back as f32 (1.2 reads 1.2000000476837158).
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) < 1e-6
    return a == b

def pick(settings, **want):
    for s in settings:
        if all(same(s.get(k), v) for k, v in want.items()):
            return s
    return None

def figures(s, d):
    if s is None:
        return None
    out = {"qps": s[f"{d}.qps"], "r@1": s[f"{d}.r@1"], "r@10": s[f"{d}.r@10"], "queries": s[f"{d}.queries"]}
    # The share of the exact search's first 10 found (every setting but the exact one).
    if f"{d}.overlap@10" in s:
        out["overlap@10"] = s[f"{d}.overlap@10"]
    return out

# Only this run's dense baseline (an earlier run's results may lie beside).
_, dense = load("dense-baseline") if dense_model else (None, None)
dense_settings = dense["settings"] if dense else []
dense_heldout = settings_in("dense-baseline") if dense_model else []

def directions(ss, dense_ss):
    """Per direction, the figures of every setting of a sparse and a dense evaluation."""
    rows = {
        "sparse_exact": pick(ss, search="exact", top_k=None),
        "sparse_cut": pick(ss, search="approx", term_cut=0.1, top_k=None),
        "dense_exact": pick(dense_ss, search="exact"),
        "dense_hnsw": pick(dense_ss, search="hnsw"),
    }
    for k in (64, 32, 16, 8):
        rows[f"sparse_top{k}"] = pick(ss, search="exact", top_k=k)
    out = {}
    for d in ("t2i", "i2t"):
        for k, s in rows.items():
            out[f"{d}.{k}"] = figures(s, d)
        # The issue's approximate target: the fastest factor over the full vectors that still
        # finds 95 % of the exact first 10 (null when none does).
        out[f"{d}.sparse_approx"] = fastest_kept(ss, d, top_k=None, cuts=False)
    return out, rows

def fastest_kept(ss, d, top_k, cuts=True):
    """The fastest approximate setting of one collection (factors, and term cuts when `cuts`)
    that finds 95 % of that collection's exact first 10, with its factor and cut; None when
    none does."""
    kept = [s for s in ss if s["search"] == "approx" and s.get("top_k") == top_k
            and (cuts or "term_cut" not in s) and s.get(f"{d}.overlap@10", 0.0) >= 0.95]
    best = max(kept, key=lambda s: s[f"{d}.qps"], default=None)
    out = figures(best, d)
    if best is not None:
        out["approx"] = round(best["approx"], 3)
        if "term_cut" in best:
            out["term_cut"] = round(best["term_cut"], 3)
    return out
# What answered a query in every evaluation of the run (`lexlip eval --relevance`).
report = {"images": images, "relevance": "caption", "models": {}}
for m in models:
    name = os.path.basename(m.rstrip("/"))
    index, ev = load(name)
    seconds, rss_kb = index
    ss = ev["settings"]
    figures_by_direction, rows = directions(ss, dense_settings)
    entry = {
        "index.images_per_s": images / seconds,
        "index.peak_rss_mb": rss_kb / 1024,
        "index.seconds": seconds,
        "bytes_per_item.sparse": rows["sparse_exact"]["vector_bytes_per_image"],
        "bytes_per_item.dense": rows["dense_exact"]["vector_bytes_per_image"] if rows["dense_exact"] else None,
        "serve": served(name),
    }
    entry.update(figures_by_direction)
    add(entry, weighted(name, "eval-idf.json"))
    # The held-out pictures among the N (`lexlip eval --distractors`).
    entry["heldout"], _ = directions(settings_in(name), dense_heldout)
    add(entry["heldout"], weighted(name, "heldout-idf.json"))
    report["models"][name] = entry
if dense:
    exact = pick(dense_settings, search="exact")
    hnsw = pick(dense_settings, search="hnsw")
    index, _ = load("dense-baseline")
    report["dense_index"] = {
        "model": os.path.basename(dense_model.rstrip("/")),
        "images_per_s": images / index[0],
        "peak_rss_mb": index[1] / 1024,
        "seconds": index[0],
        "vectors_seconds": exact["index_seconds"],
        "hnsw_seconds": hnsw["index_seconds"] if hnsw else None,
        "serve": served("dense-baseline"),
    }
text = json.dumps(report, indent=1)
if out:
    open(out, "w").write(text + "\n")
print(text)
EOF
