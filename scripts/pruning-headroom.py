#!/usr/bin/env python3
"""How much can any pruning skip on the engine benchmark's synthetic data? (numpy + scipy)

Rebuilds the distribution of `lexlip bench engine` (1M documents, 30,522-term vocabulary with
popularity ∝ 1/(rank+10), 35-65 terms per document, 20-40 per query, impacts
floor(100·log(1+x)), x ~ Exp(mean 1.5)) and measures, with oracles that have no overhead:
  1. MaxScore at the *final* top-10 threshold: the share of postings in essential lists (those a
     MaxScore/WAND evaluation must still traverse) — an upper bound on exact dynamic pruning;
  2. score-at-a-time (impact-ordered) early termination: recall@10 when only the largest q·d
     contributions up to a budget are accumulated and the best 100 candidates are rescored exactly.
"""
import numpy as np, scipy.sparse as sp
rng = np.random.default_rng(1)
V = 30522; N = 1_000_000
p = 1.0 / (np.arange(V) + 10.0); p /= p.sum()
cdf = np.cumsum(p)
def impacts(n):
    x = rng.exponential(1.5, n)
    return np.clip(np.floor(100*np.log1p(x)), 1, 255).astype(np.int32)
rows=[]; cols=[]; vals=[]
nnz = rng.integers(35, 66, N)
tot = nnz.sum()
terms = np.searchsorted(cdf, rng.random(int(tot*1.3)))
pos = 0
docs_t = []
ptr = 0
R=[];C=[]
for d in range(N):
    k = nnz[d]
    t = np.unique(terms[ptr:ptr+k+10])[:k]; ptr += k+10
    if ptr + 200 > len(terms):
        terms = np.searchsorted(cdf, rng.random(int(tot*1.3))); ptr = 0
    R.append(np.full(len(t), d)); C.append(t)
R=np.concatenate(R); C=np.concatenate(C); Vv=impacts(len(R))
M = sp.csc_matrix((Vv.astype(np.float64), (R, C)), shape=(N, V))
df = np.diff(M.indptr)
mx = np.zeros(V); 
for t in range(V):
    s, e = M.indptr[t], M.indptr[t+1]
    if e > s: mx[t] = M.data[s:e].max()
def query():
    """A random query (20-40 terms drawn as the documents' are, their impacts), and every
    document's exact score."""
    k = rng.integers(20, 41)
    qt = np.unique(np.searchsorted(cdf, rng.random(k+10)))[:k]
    qv = impacts(len(qt)).astype(np.float64)
    return qt, qv, M[:, qt] @ qv
fr=[]
for qi in range(50):
    qt, qv, scores = query()
    theta = np.sort(scores)[-10]
    ub = qv * mx[qt]
    order = np.argsort(ub)
    csum = np.cumsum(ub[order])
    ne = order[csum <= theta]
    post = df[qt].sum(); ess = post - df[qt[ne]].sum()
    fr.append(ess/post)
print("postings/query", post, "theta", theta, "non-essential terms", len(ne), "of", len(qt))
print("essential fraction mean %.3f median %.3f min %.3f" % (np.mean(fr), np.median(fr), np.min(fr)))

# Score-at-a-time (impact-ordered) approximate: take the postings with the largest q·d first,
# up to a budget; rank by the partial sums; recall@10 against the exact top-10.
Mr = M.tocsc()
for budget in [0.02, 0.05, 0.10, 0.20]:
    rec = []
    for qi in range(30):
        qt, qv, scores = query()
        top = set(np.argsort(-scores, kind='stable')[:10])
        docs=[]; contrib=[]
        for t, q in zip(qt, qv):
            s, e = Mr.indptr[t], Mr.indptr[t+1]
            docs.append(Mr.indices[s:e]); contrib.append(Mr.data[s:e]*q)
        docs=np.concatenate(docs); contrib=np.concatenate(contrib)
        n = max(1, int(len(docs)*budget))
        sel = np.argpartition(-contrib, n-1)[:n]
        part = np.bincount(docs[sel], weights=contrib[sel], minlength=N)
        # rescore the best 100 candidates exactly
        cand = np.argpartition(-part, 100)[:100]
        exact = scores[cand]
        got = set(cand[np.argsort(-exact)[:10]])
        rec.append(len(top & got)/10)
    print("budget %.2f recall@10 %.3f" % (budget, np.mean(rec)))
