#!/usr/bin/env python3
"""Single-threaded top-10 search on real learned-sparse vectors: brute force vs Seismic vs BMP.

What it measures
----------------
All systems search the same documents with the same queries, one query at a time, on one thread:

1. "scipy brute force": a scipy.sparse CSR matrix of every document (float64, so integer dot
   products are exact) times a dense query vector, then top-10 with numpy.argpartition. This is
   the exhaustive baseline; its scores are also used to check TRUTH_RUN.
2. Seismic (PyPI pyseismic-lsr 0.5.4, import name `seismic`): SeismicIndex.build_from_dataset on
   a SeismicDataset filled with add_documents_by_id, then SeismicIndex.search (the per-query call)
   over a grid of query_cut x heap_factor. Approximate by design.
3. BMP, Block-Max Pruning (PyPI bmp 0.2.8, Mallia et al. SIGIR 2024): bmp.Indexer(path, bsize,
   compress_range) fed with add_document in the input order (lexlip's document order), then
   bmp.Searcher(path).search(query_dict, k, alpha, beta). alpha=beta=1 is BMP's "exact" mode, but
   BMP stores document impacts as u8, rescales query weights so that the largest is 32, and adds
   scores in u16, so even that mode is exact only for its quantised scores (see "notes" in the
   output JSON).

For every configuration it reports recall@10 against TRUTH_RUN, mean / p50 / p99 search latency
(time.perf_counter around the one search call; loading, building and mapping results back are not
timed; a few warm-up queries run first), build seconds, index bytes (file size on disk where the
system writes one; the in-memory CSR arrays for scipy) and bytes per document non-zero.

Recall@10 = mean over queries with a non-empty truth of |returned top-10 that are correct| /
|truth top-10|. Scores are integer dot products, so several documents can tie at the 10th score: a
returned document counts as correct when its exact score (computed with the scipy matrix) is >= the
truth's last (10th) score and > 0. The returned hits are capped at |truth|.

Inputs are Anserini JsonVectorCollection lines: {"id": "d12", "vector": {"token": 37, ...}, ...}
with integer impacts. The vocabulary is the union of document tokens; query tokens that occur in
no document are dropped. TRUTH_RUN is a TREC run: `qid Q0 docid rank score tag`, top 10 per query.

Usage
-----
    python -m venv /work/venvs/realbench
    /work/venvs/realbench/bin/pip install pyseismic-lsr==0.5.4 bmp==0.2.8 scipy numpy
    /work/venvs/realbench/bin/python scripts/real_sparse_bench.py \\
        DOCS_JSONL QUERIES_JSONL TRUTH_RUN OUT_JSON \\
        [--systems scipy,seismic,bmp] [--limit-queries N] [--seismic-n-postings 1500] [--workdir DIR]

It prints a markdown table to stdout and writes OUT_JSON:
    {"corpus": {...}, "systems": [{"system", "params", "recall_at_10", "mean_ms", "p50_ms",
     "p99_ms", "build_s", "bytes", "bytes_per_nnz"}, ...], "versions": {...}, "notes": [...]}
"""
import os

# One thread everywhere. Both Rust extensions use rayon; set this before they are imported.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import importlib.metadata
import json
import shutil
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp

K = 10
WARMUP_QUERIES = 5

# Seismic search grid.
SEISMIC_QUERY_CUTS = [3, 5, 8, 10, 15, 20]
SEISMIC_HEAP_FACTORS = [0.7, 0.8, 0.9, 1.0]

# Seismic build parameters. The package defaults (n_postings=3500, centroid_fraction=0.1,
# summary_energy=0.4, doc_cut=15, max_fraction=1.5) are the MS MARCO recipe for 8.8M passages.
# Scaling n_postings strictly with the collection (3500 * 250k / 8.8M ~ 100) would leave almost
# nothing in each list, because Seismic keeps the n_postings highest-impact postings of a term
# whatever the collection size. We keep ~1500 postings per list for ~250k documents: the long
# lists (frequent word pieces) are pruned to their top impacts as in the paper, while most lists
# of a 250k collection stay whole. Override with --seismic-n-postings (comma list to sweep).
SEISMIC_DEFAULT_N_POSTINGS = "1500"
SEISMIC_BUILD = dict(centroid_fraction=0.1, min_cluster_size=2, summary_energy=0.4,
                     max_fraction=1.5, doc_cut=15)

# BMP: block sizes, and (alpha, beta) pairs; (1.0, 1.0) is its safe ("exact") mode.
BMP_BLOCK_SIZES = [16, 32]
BMP_ALPHA_BETA = [(1.0, 1.0), (0.95, 1.0), (0.9, 1.0), (0.8, 1.0), (1.0, 0.7), (0.9, 0.7)]
BMP_MAX_IMPACT = 255  # BMP keeps document impacts as u8


# ----------------------------------------------------------------------------------------------
# Loading


def read_vectors(path, limit=None):
    """Returns (ids, vectors) from a JsonVectorCollection file; vectors are {token: int}."""
    ids, vectors = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            if limit is not None and len(ids) >= limit:
                break
            obj = json.loads(line)
            ids.append(str(obj["id"]))
            vectors.append({str(t): int(v) for t, v in (obj.get("vector") or {}).items()})
    return ids, vectors


def read_truth(path):
    """Returns {qid: [(docid, score), ...] in rank order}."""
    rows = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 5:
                continue
            qid, _, docid, rank, score = parts[:5]
            rows.setdefault(qid, []).append((int(rank), docid, float(score)))
    return {q: [(d, s) for _, d, s in sorted(r)] for q, r in rows.items()}


def build_matrix(doc_vectors):
    """Vocabulary (token -> column, in first-seen order) and a CSR matrix with sorted columns."""
    vocab = {}
    indptr = [0]
    indices, data = [], []
    for vec in doc_vectors:
        for tok, val in vec.items():
            if val == 0:
                continue
            indices.append(vocab.setdefault(tok, len(vocab)))
            data.append(val)
        indptr.append(len(indices))
    matrix = sp.csr_matrix(
        (np.asarray(data, dtype=np.float64), np.asarray(indices, dtype=np.int32),
         np.asarray(indptr, dtype=np.int64)),
        shape=(len(doc_vectors), len(vocab)))
    matrix.sum_duplicates()
    matrix.sort_indices()
    return vocab, matrix


class Query:
    """A query restricted to document vocabulary: sorted column ids and their weights."""

    def __init__(self, qid, vec, vocab):
        pairs = sorted((vocab[t], v) for t, v in vec.items() if t in vocab and v != 0)
        self.qid = qid
        self.terms = np.array([p[0] for p in pairs], dtype=np.int64)
        self.weights = np.array([p[1] for p in pairs], dtype=np.float64)
        self.dropped = len(vec) - len(pairs)


# ----------------------------------------------------------------------------------------------
# Measurement


def exact_scores_of(matrix, query, rows):
    """Exact dot products of `query` with the given document rows."""
    if len(rows) == 0:
        return np.zeros(0)
    sub = matrix[np.asarray(rows, dtype=np.int64)][:, query.terms]
    return np.asarray(sub @ query.weights).ravel()


def recall_at_10(matrix, queries, truth_rows, results):
    """Mean over queries of (returned docs whose exact score >= truth's last score) / |truth|."""
    total = 0.0
    for q, returned in zip(queries, results):
        truth = truth_rows[q.qid]
        threshold = truth[-1][1]
        returned = list(dict.fromkeys(int(r) for r in returned))[:K]
        scores = exact_scores_of(matrix, q, returned)
        hits = int(np.sum((scores >= threshold) & (scores > 0)))
        total += min(hits, len(truth)) / len(truth)
    return total / len(queries)


def timed_run(search, queries):
    """Runs `search` on every query (after warm-up); returns (results, latencies in ms)."""
    for q in queries[:WARMUP_QUERIES]:
        search(q)
    results, lat = [], []
    for q in queries:
        t0 = time.perf_counter()
        res = search(q)
        lat.append((time.perf_counter() - t0) * 1000.0)
        results.append(res)
    return results, np.asarray(lat)


def report_row(system, params, recall, lat, build_s, nbytes, nnz):
    return {
        "system": system,
        "params": params,
        "recall_at_10": round(float(recall), 4),
        "mean_ms": round(float(lat.mean()), 4),
        "p50_ms": round(float(np.percentile(lat, 50)), 4),
        "p99_ms": round(float(np.percentile(lat, 99)), 4),
        "build_s": None if build_s is None else round(float(build_s), 3),
        "bytes": None if nbytes is None else int(nbytes),
        "bytes_per_nnz": None if nbytes is None else round(nbytes / nnz, 3),
    }


# ----------------------------------------------------------------------------------------------
# Systems


def run_scipy(matrix, queries, truth_rows, nnz, build_s):
    dense = np.zeros(matrix.shape[1], dtype=np.float64)

    def search(q):
        dense[q.terms] = q.weights
        scores = matrix @ dense
        dense[q.terms] = 0.0
        top = np.argpartition(-scores, K - 1)[:K] if len(scores) > K else np.arange(len(scores))
        return top[np.argsort(-scores[top], kind="stable")]

    results, lat = timed_run(search, queries)
    nbytes = matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes
    row = report_row("scipy brute force",
                     {"matrix": "CSR float64 x dense query, argpartition top-10",
                      "bytes_kind": "in-memory CSR arrays (no file)",
                      "build_kind": "building the CSR from parsed vectors"},
                     recall_at_10(matrix, queries, truth_rows, results), lat, build_s, nbytes, nnz)
    return [row]


def run_seismic(matrix, queries, truth_rows, nnz, workdir, n_postings_list):
    import seismic

    string_type = seismic.get_seismic_string()
    rows = []
    t0 = time.perf_counter()
    dataset = seismic.SeismicDataset(dim=matrix.shape[1])
    # Component ids are our column ids; documents are named by their row number.
    dataset.add_documents_by_id(
        [str(i) for i in range(matrix.shape[0])],
        matrix.indices.astype(np.int64),
        matrix.data.astype(np.float32),
        matrix.indptr.astype(np.int64))
    dataset_s = time.perf_counter() - t0

    # Queries address component 42 as the string "42".
    q_comps = [np.array([str(t) for t in q.terms], dtype=string_type) for q in queries]
    q_vals = [q.weights.astype(np.float32) for q in queries]
    by_index = {id(q): i for i, q in enumerate(queries)}

    for n_postings in n_postings_list:
        t0 = time.perf_counter()
        index = seismic.SeismicIndex.build_from_dataset(
            dataset, n_postings=n_postings, num_threads=1, **SEISMIC_BUILD)
        build_s = dataset_s + time.perf_counter() - t0
        prefix = os.path.join(workdir, f"seismic_{n_postings}")
        index.save(prefix)
        path = prefix + ".index.seismic"
        nbytes = os.path.getsize(path) if os.path.exists(path) else None
        if nbytes is not None:
            os.remove(path)

        for query_cut in SEISMIC_QUERY_CUTS:
            for heap_factor in SEISMIC_HEAP_FACTORS:
                def search(q):
                    i = by_index[id(q)]
                    return index.search(q.qid, q_comps[i], q_vals[i], K, query_cut, heap_factor)

                results, lat = timed_run(search, queries)
                results = [[int(doc) for _, _, doc in res] for res in results]
                params = {"n_postings": n_postings, **SEISMIC_BUILD,
                          "query_cut": query_cut, "heap_factor": heap_factor}
                rows.append(report_row("seismic", params,
                                       recall_at_10(matrix, queries, truth_rows, results),
                                       lat, build_s, nbytes, nnz))
        del index
    return rows


def run_bmp(matrix, queries, truth_rows, nnz, workdir, notes):
    import bmp

    if matrix.shape[1] > 65536:
        notes.append("bmp skipped: BMP keeps term ids as u16 and the vocabulary is larger")
        return []
    max_impact = float(matrix.data.max()) if matrix.nnz else 0.0
    data = matrix.data
    if max_impact > BMP_MAX_IMPACT:
        data = np.maximum(1.0, np.floor(matrix.data * BMP_MAX_IMPACT / max_impact))
        notes.append(f"bmp: max document impact {max_impact:g} > {BMP_MAX_IMPACT}; impacts were "
                     f"rescaled to max(1, floor(x*{BMP_MAX_IMPACT}/{max_impact:g})) for BMP only")
    data = data.astype(np.int64)
    notes.append("bmp: BMP rescales each query so its largest weight becomes 32 and sums scores in "
                 "u16, so alpha=1,beta=1 is exact for BMP's quantised scores, not for the integer "
                 "dot products of the truth run")

    # Term and document names: column / row numbers as strings; documents in input order.
    tokens = [str(c) for c in range(matrix.shape[1])]
    q_dicts = [{tokens[t]: int(w) for t, w in zip(q.terms, q.weights)} for q in queries]
    by_index = {id(q): i for i, q in enumerate(queries)}
    rows = []
    for bsize in BMP_BLOCK_SIZES:
        path = os.path.join(workdir, f"bmp_{bsize}.bmp")
        t0 = time.perf_counter()
        indexer = bmp.Indexer(path, bsize=bsize, compress_range=False)
        for r in range(matrix.shape[0]):
            lo, hi = matrix.indptr[r], matrix.indptr[r + 1]
            indexer.add_document(str(r), {tokens[c]: int(v) for c, v in
                                          zip(matrix.indices[lo:hi], data[lo:hi])})
        indexer.finish()
        build_s = time.perf_counter() - t0
        nbytes = os.path.getsize(path)
        searcher = bmp.Searcher(path)

        for alpha, beta in BMP_ALPHA_BETA:
            def search(q):
                docs, _ = searcher.search(q_dicts[by_index[id(q)]], k=K, alpha=alpha, beta=beta)
                return docs

            results, lat = timed_run(search, queries)
            results = [[int(d) for d in res] for res in results]
            params = {"bsize": bsize, "compress_range": False, "alpha": alpha, "beta": beta,
                      "mode": "safe" if (alpha, beta) == (1.0, 1.0) else "approximate"}
            rows.append(report_row("bmp", params,
                                   recall_at_10(matrix, queries, truth_rows, results),
                                   lat, build_s, nbytes, nnz))
        del searcher
        os.remove(path)
    return rows


# ----------------------------------------------------------------------------------------------
# Truth check and output


def check_truth(matrix, queries, truth_rows):
    """Counts queries whose brute-force top-1 (and whole top-10) scores equal the run's scores."""
    dense = np.zeros(matrix.shape[1], dtype=np.float64)
    top1_agree = top10_agree = 0
    for q in queries:
        dense[q.terms] = q.weights
        scores = matrix @ dense
        dense[q.terms] = 0.0
        best = np.sort(scores)[::-1][:K]
        best = best[best > 0]
        run_scores = np.array([s for _, s in truth_rows[q.qid]])
        top1_agree += bool(len(best) and best[0] == run_scores[0])
        top10_agree += bool(len(best) == len(run_scores) and np.array_equal(best, run_scores))
    return top1_agree, top10_agree


def markdown_table(rows):
    out = ["| system | params | recall@10 | mean ms | p50 ms | p99 ms | build s | bytes | B/nnz |",
           "|---|---|---|---|---|---|---|---|---|"]
    skip = set(SEISMIC_BUILD) | {"matrix", "bytes_kind", "build_kind", "compress_range", "mode"}
    for r in rows:
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items() if k not in skip)
        out.append("| {} | {} | {:.4f} | {:.3f} | {:.3f} | {:.3f} | {} | {} | {} |".format(
            r["system"], params, r["recall_at_10"], r["mean_ms"], r["p50_ms"], r["p99_ms"],
            "n/a" if r["build_s"] is None else f"{r['build_s']:.2f}",
            "n/a" if r["bytes"] is None else r["bytes"],
            "n/a" if r["bytes_per_nnz"] is None else f"{r['bytes_per_nnz']:.2f}"))
    return "\n".join(out)


def version_of(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("docs")
    ap.add_argument("queries")
    ap.add_argument("truth")
    ap.add_argument("out_json")
    ap.add_argument("--systems", default="scipy,seismic,bmp")
    ap.add_argument("--limit-queries", type=int, default=None,
                    help="use only the first N queries of QUERIES_JSONL")
    ap.add_argument("--seismic-n-postings", default=SEISMIC_DEFAULT_N_POSTINGS,
                    help="comma list of Seismic n_postings values to build (default %(default)s)")
    ap.add_argument("--workdir", default=None, help="where index files go (default: a temp dir)")
    args = ap.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - {"scipy", "seismic", "bmp"}
    if unknown:
        ap.error(f"unknown systems: {sorted(unknown)}")

    t0 = time.perf_counter()
    doc_ids, doc_vectors = read_vectors(args.docs)
    t1 = time.perf_counter()
    vocab, matrix = build_matrix(doc_vectors)
    csr_build_s = time.perf_counter() - t1
    del doc_vectors
    row_of = {d: i for i, d in enumerate(doc_ids)}
    qids, q_vectors = read_vectors(args.queries, args.limit_queries)
    truth = read_truth(args.truth)
    print(f"loaded {matrix.shape[0]} docs, {matrix.nnz} nnz, {len(vocab)} terms, "
          f"{len(qids)} queries in {time.perf_counter() - t0:.1f}s", file=sys.stderr)

    # Truth rows in terms of our row numbers; queries with an empty truth are not evaluated.
    notes = ["recall counts ties at the 10th score as hits",
             "search is single-threaded (RAYON_NUM_THREADS=1, per-query calls); builds also use "
             "one thread",
             "latency is wall time of the search call only (time.perf_counter), after "
             f"{WARMUP_QUERIES} warm-up queries"]
    truth_rows, queries, dropped_terms, unknown_truth_docs = {}, [], 0, 0
    for qid, vec in zip(qids, q_vectors):
        known = [(d, s) for d, s in truth.get(qid, []) if d in row_of]
        unknown_truth_docs += len(truth.get(qid, [])) - len(known)
        q = Query(qid, vec, vocab)
        dropped_terms += q.dropped
        if known and len(q.terms):
            truth_rows[qid] = known
            queries.append(q)
    if not queries:
        sys.exit("no query has both a non-empty truth and a term found in the documents")
    if unknown_truth_docs:
        notes.append(f"{unknown_truth_docs} truth entries name documents not in DOCS_JSONL "
                     "(ignored)")
    skipped = len(qids) - len(queries)
    if skipped:
        notes.append(f"{skipped} queries skipped (empty truth or no term in the documents)")

    top1, top10 = check_truth(matrix, queries, truth_rows)
    msg = (f"truth check: brute-force top-1 score equals the run's rank-1 score for {top1}/"
           f"{len(queries)} queries; whole top-10 score lists equal for {top10}/{len(queries)}")
    print(msg, file=sys.stderr)
    notes.append(msg)

    nnz = matrix.nnz
    doc_nnz = np.diff(matrix.indptr)
    corpus = {
        "docs": int(matrix.shape[0]),
        "nnz": int(nnz),
        "mean_doc_nnz": round(float(doc_nnz.mean()), 3),
        "vocab": len(vocab),
        "max_doc_impact": float(matrix.data.max()) if nnz else 0.0,
        "queries": len(queries),
        "mean_query_nnz": round(float(np.mean([len(q.terms) for q in queries])), 3),
        "query_terms_not_in_docs": dropped_terms,
    }

    workdir = args.workdir or tempfile.mkdtemp(prefix="real_sparse_bench_")
    os.makedirs(workdir, exist_ok=True)
    rows = []
    try:
        if "scipy" in systems:
            rows += run_scipy(matrix, queries, truth_rows, nnz, csr_build_s)
            print("scipy done", file=sys.stderr)
        if "seismic" in systems:
            n_postings = [int(x) for x in args.seismic_n_postings.split(",") if x.strip()]
            rows += run_seismic(matrix, queries, truth_rows, nnz, workdir, n_postings)
            print("seismic done", file=sys.stderr)
        if "bmp" in systems:
            rows += run_bmp(matrix, queries, truth_rows, nnz, workdir, notes)
            print("bmp done", file=sys.stderr)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)

    result = {
        "corpus": corpus,
        "systems": rows,
        "versions": {"pyseismic-lsr": version_of("pyseismic-lsr"), "bmp": version_of("bmp"),
                     "scipy": version_of("scipy"), "numpy": version_of("numpy"),
                     "python": sys.version.split()[0]},
        "notes": notes,
    }
    with open(args.out_json, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
        f.write("\n")

    print(f"corpus: {json.dumps(corpus)}\n")
    print(markdown_table(rows))
    print()
    for n in notes:
        print(f"- {n}")


if __name__ == "__main__":
    main()
