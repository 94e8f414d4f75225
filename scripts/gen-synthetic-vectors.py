#!/usr/bin/env python3
"""Writes a LexLIP-shaped synthetic collection and queries for load tests.

Documents: ~50 distinct terms from a 30,522-term vocabulary with Zipf-skewed popularity, integer
impacts shaped like floor(100·log(1+relu(x))). Queries: 20-40 terms, as wrk request bodies for
`POST /v1/collections/{name}/search`. Usage:
    gen-synthetic-vectors.py DOCS OUT.jsonl QUERIES OUT_QUERIES.jsonl [SEED]
"""
import json
import sys

import numpy as np

VOCAB = 30522


def vectors(rng, n, lo, hi, weights):
    for _ in range(n):
        k = int(rng.integers(lo, hi + 1))
        terms = np.unique(rng.choice(VOCAB, size=k * 2, p=weights))[:k]
        x = rng.gamma(2.0, 0.8, size=len(terms))
        impacts = np.floor(100 * np.log1p(x)).astype(int)
        yield {f"t{t}": int(i) for t, i in zip(terms, impacts) if i > 0}


def main():
    docs, out, queries, qout = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    seed = int(sys.argv[5]) if len(sys.argv) > 5 else 42
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, VOCAB + 1, dtype=np.float64)
    weights = ranks ** -1.0
    weights /= weights.sum()
    with open(out, "w") as f:
        for i, v in enumerate(vectors(rng, docs, 45, 55, weights)):
            f.write(json.dumps({"id": f"d{i}", "vector": v}, separators=(",", ":")) + "\n")
    with open(qout, "w") as f:
        for v in vectors(rng, queries, 20, 40, weights):
            f.write(json.dumps({"query": {"sparse": v}, "k": 10}, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
