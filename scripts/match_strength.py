#!/usr/bin/env python3
"""How `match_strength` separates real queries from nonsense, on a running `lexlip serve`.

Sends each caption of a TSV (`title<TAB>filepath<TAB>image_id`, the eval format) as a
text->image query to a collection of its images, and as many nonsense strings (random letters,
seeded), and prints the quantiles of the best hit's match strength for both, with the share of
each above a threshold, and the quantiles of both kinds of queries' weight norms.

With --images, the queries are pictures instead (image->text, what the search page asks for an
image): the TSV's pictures (give pictures of concepts the collection holds, in another style),
and as many nonsense pictures (seeded random blocks of colour, which show nothing). The
calibration keys are then `"image"`.

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
import base64
import json
import os
import random
import string
import struct
import urllib.request
import zlib


def best_strength(url, collection, query, route="text-to-image"):
    """The best hit's match strength of a query (`{"text": …}` or `{"image": base64}`)."""
    body = json.dumps({"collection": collection, **query, "k": 1}).encode()
    req = urllib.request.Request(
        f"{url}/v1/search/{route}", data=body, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req) as r:
        hits = json.load(r)["hits"]
    return hits[0].get("match_strength", 0.0) if hits else 0.0


def nonsense_png(rng, side=64, block=8):
    """A base64 PNG of random blocks of colour: a picture of nothing."""
    cells = side // block
    colours = [[bytes(rng.randrange(256) for _ in range(3)) for _ in range(cells)] for _ in range(cells)]
    rows = b"".join(
        b"\x00" + b"".join(colours[y // block][x // block] for x in range(side)) for y in range(side)
    )
    chunk = lambda kind, data: (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    )
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


def query_norm(url, query):
    """The L2 norm of the query's weights as the model encodes it (no collection: uncut);
    `query` is a text, or {"image": base64}."""
    body = json.dumps(query if isinstance(query, dict) else {"text": query}).encode()
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
    ap.add_argument("--images", action="store_true", help="picture queries (image->text)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with open(args.tsv, encoding="utf-8") as f:
        rows = [line.split("\t") for line in f.read().splitlines()[1:] if line.strip()]
    if args.images:
        root = os.path.dirname(os.path.abspath(args.tsv))
        files = sorted({r[1] for r in rows})
        files = rng.sample(files, min(args.queries, len(files)))
        captions = []
        for p in files:
            with open(os.path.join(root, p), "rb") as f:
                captions.append({"image": base64.b64encode(f.read()).decode()})
        nonsense = [{"image": nonsense_png(rng)} for _ in captions]
        best = lambda q: best_strength(args.url, args.collection, q, "image-to-text")
    else:
        captions = rng.sample([r[0] for r in rows], min(args.queries, len(rows)))
        nonsense = [
            "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 8)))
            for _ in captions
        ]
        best = lambda q: best_strength(args.url, args.collection, {"text": q})
    real = [best(c) for c in captions]
    fake = [best(n) for n in nonsense]
    out = {
        "queries": len(real),
        "modality": "image" if args.images else "text",
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
