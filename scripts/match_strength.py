#!/usr/bin/env python3
"""How `match_strength` separates real queries from nonsense, on a running `lexlip serve`.

Sends each caption of a TSV (`title<TAB>filepath<TAB>image_id`, the eval format) as a
text->image query to a collection of its images, and as many nonsense strings (random letters,
seeded), and prints the quantiles of the best hit's match strength for both, with the share of
each above a threshold, and the quantiles of both kinds of queries' weight norms.

A model's calibration is chosen from this table, in two steps:
- `"query_norm": {"text": N}` in its lexlip.json, with N the captions' median norm (`p50` under
  `query_norm`). A model puts less weight on a query it does not understand, so a query lighter
  than N has its strengths scaled down by its squared share of N. Restart the server with it.
- `"weak_match": {"text": X}`, which the server returns with each text query's hits and the
  search page uses to grey out weak hits: a threshold most real captions' best hits pass and
  most nonsense queries' do not.
Use captions of concepts the model was trained on (a held-out style of them, say): for concepts
it never saw, weak matches are the truth. Standard library only.

    lexlip index --tsv data/test.tsv --collection lexlip-data/collections/test --model M
    lexlip serve --data lexlip-data --model M &
    scripts/match_strength.py --tsv data/test.tsv --collection test [--url http://127.0.0.1:8080]
"""

import argparse
import json
import random
import string
import urllib.request


def best_strength(url, collection, text):
    body = json.dumps({"collection": collection, "text": text, "k": 1}).encode()
    req = urllib.request.Request(
        f"{url}/v1/search/text-to-image", data=body, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req) as r:
        hits = json.load(r)["hits"]
    return hits[0].get("match_strength", 0.0) if hits else 0.0


def query_norm(url, text):
    """The L2 norm of the query's weights as the model encodes it (no collection: uncut)."""
    body = json.dumps({"text": text}).encode()
    req = urllib.request.Request(
        f"{url}/v1/encode", data=body, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req) as r:
        terms = json.load(r)["terms"]
    return sum(w * w for w in terms.values()) ** 0.5


def quantiles(xs):
    xs = sorted(xs)
    pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]
    return {f"p{int(q * 100)}": round(pick(q), 3) for q in (0.1, 0.25, 0.5, 0.75, 0.9)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tsv", required=True)
    ap.add_argument("--collection", required=True)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--thresholds", default="0.05,0.1,0.15,0.2,0.3")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with open(args.tsv, encoding="utf-8") as f:
        captions = [line.split("\t")[0] for line in f.read().splitlines()[1:] if line.strip()]
    captions = rng.sample(captions, min(args.queries, len(captions)))
    nonsense = [
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 8)))
        for _ in captions
    ]
    real = [best_strength(args.url, args.collection, c) for c in captions]
    fake = [best_strength(args.url, args.collection, n) for n in nonsense]
    out = {
        "queries": len(real),
        "captions": quantiles(real),
        "nonsense": quantiles(fake),
        "query_norm": {
            "captions": quantiles([query_norm(args.url, c) for c in captions]),
            "nonsense": quantiles([query_norm(args.url, n) for n in nonsense]),
        },
    }
    for t in (float(x) for x in args.thresholds.split(",")):
        out[f"above_{t}"] = {
            "captions": round(sum(x >= t for x in real) / len(real), 3),
            "nonsense": round(sum(x >= t for x in fake) / len(fake), 3),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
