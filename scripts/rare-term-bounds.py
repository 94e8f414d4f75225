#!/usr/bin/env python3
"""What bounding rare terms from coarser codes would cost and save, on exported vectors.

Usage: rare-term-bounds.py DOCS.export.jsonl QUERIES.export.jsonl [QUERIES_USED]
(numpy + scipy; the files as `lexlip export` writes them, e.g. `docs.export.jsonl` and
`queries.export.jsonl` of `scripts/bench-real-sparse.sh`, in the collection's document order).
Postings read are averaged over every query; blocks to score over the first QUERIES_USED
(default 500: each needs a product over every document).

A term in fewer than a quarter of a segment's blocks keeps no bound codes (documents layout,
`indexer/src/forward.rs`): every query reads its tantivy postings to bound the blocks, ~2 ns
per posting. This prints, for blocks of 8 documents:
  1. how many terms are uncoded, their share of the non-zeros, and how many of their postings a
     query reads, by document frequency;
  2. what coding more of them would cost in bytes per non-zero (4-bit codes for every block, or
     a presence bitmap plus 4 bits per block the term is in);
  3. how much looser the bounds get: the blocks whose bound reaches the final top-10 threshold
     (those an exact best-first search must score) with exact block maxima, with 4-bit or 2-bit
     codes, or with presence times the term's largest impact, for the terms coded anew.
"""
import collections
import json
import sys

import numpy as np
import scipy.sparse as sp

SHIFT = 3


def read(path):
    return [json.loads(line)["vector"] for line in open(path) if line.strip()]


def main():
    docs, queries = read(sys.argv[1]), read(sys.argv[2])
    used = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    vocab, rows, cols, vals = {}, [], [], []
    for i, v in enumerate(docs):
        for t, w in v.items():
            rows.append(i)
            cols.append(vocab.setdefault(t, len(vocab)))
            vals.append(w)
    n, nv = len(docs), len(vocab)
    blocks = (n + (1 << SHIFT) - 1) >> SHIFT
    rows, cols, vals = np.array(rows), np.array(cols), np.array(vals, dtype=np.float64)
    nnz = len(vals)
    docs_m = sp.csr_matrix((vals, (rows, cols)), shape=(n, nv))
    df = np.bincount(cols, minlength=nv)
    tmax = np.zeros(nv)
    np.maximum.at(tmax, cols, vals)
    # Each (block, term)'s largest impact.
    key = (rows >> SHIFT).astype(np.int64) * nv + cols
    order = np.lexsort((vals, key))
    key, top = key[order], vals[order]
    last = np.r_[key[1:] != key[:-1], True]
    key, top = key[last], top[last]
    kb, kt = key // nv, key % nv
    exact = sp.csr_matrix((top, (kb, kt)), shape=(blocks, nv))
    uncoded = 4 * df < blocks
    print(f"{n} documents, {blocks} blocks of {1 << SHIFT}, {nnz} non-zeros, {nv} terms")
    print(f"uncoded terms {uncoded.sum()}, {df[uncoded].sum() / nnz:.1%} of the non-zeros")

    def qvec(q):
        v = np.zeros(nv)
        for t, w in q.items():
            if t in vocab:
                v[vocab[t]] = w
        return v

    qs = [qvec(q) for q in queries]
    read_per_q = np.mean([df[(q > 0) & uncoded].sum() for q in qs])
    print(f"uncoded postings read per query {read_per_q:.0f}")
    thetas = [np.sort(docs_m @ q)[-10] for q in qs[:used]]
    base = np.mean([(exact @ q >= th).sum() for q, th in zip(qs, thetas)])
    print(f"blocks an exact search must score (exact maxima): {base:.1f}")

    def looser(sel, value):
        m = sp.csr_matrix((np.where(sel[kt], value, top), (kb, kt)), shape=(blocks, nv))
        return np.mean([(m @ q >= th).sum() for q, th in zip(qs, thetas)])

    for lo in (2000, 3000):
        sel = uncoded & (df >= lo)
        pairs = sel[kt].sum()
        saved = np.mean([df[(q > 0) & sel].sum() for q in qs])
        full = sel.sum() * blocks / 2 / nnz
        sparse = (sel.sum() * blocks / 8 + pairs / 2) / nnz
        print(
            f"df >= {lo}: {sel.sum()} terms, {saved:.0f} postings per query no longer read; "
            f"4-bit codes {full:.2f} B/nnz, bitmap + 4 bits per present block {sparse:.2f} B/nnz"
        )
        for name, levels in (("4-bit", 15), ("2-bit", 3)):
            step = np.maximum(np.ceil(tmax / levels), 1)[kt]
            print(f"  {name} codes: {looser(sel, np.ceil(top / step) * step):.1f} blocks")
        print(f"  presence x largest impact: {looser(sel, tmax[kt]):.1f} blocks")


if __name__ == "__main__":
    main()
