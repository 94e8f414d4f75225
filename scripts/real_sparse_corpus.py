#!/usr/bin/env python3
"""Real short English texts for the engine benchmark on real learned-sparse vectors.

Documents: every distinct sentence (4+ words) of Debian bookworm's package long descriptions
(main/i18n/Translation-en) and every WordNet 3.0 gloss (definition; examples) from Debian's
`wordnet-base`. Queries: package synopses (the one-line short descriptions), drawn at random
with a fixed seed, none equal to a document.

    real_sparse_corpus.py TRANSLATION_EN_XZ WORDNET_DIR OUT_DIR [--queries 2000] [--seed 7]

Writes OUT_DIR/docs.jsonl and OUT_DIR/queries.jsonl as `lexlip index --manifest` input
({"id", "text"}) and OUT_DIR/corpus.json (counts, sources, seed). Standard library only.
"""
import argparse
import json
import lzma
import os
import random
import re

SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def debian_descriptions(path):
    """(synopses, long-description sentences) of a Translation-en file."""
    synopses, sentences = [], []
    current = None

    def flush():
        if current:
            text = " ".join(line for line in current if line != ".")
            sentences.extend(s for s in SENTENCE_END.split(text) if len(s.split()) >= 4)

    with lzma.open(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("Description-en: "):
                flush()
                synopses.append(line[len("Description-en: "):].strip())
                current = []
            elif current is not None and line.startswith(" "):
                current.append(line.strip())
            else:
                flush()
                current = None
    flush()
    return synopses, sentences


def wordnet_glosses(directory):
    """The gloss of every synset of data.{noun,verb,adj,adv}."""
    glosses = []
    for pos in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(directory, f"data.{pos}"), encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  ") or " | " not in line:
                    continue  # licence header
                gloss = line.split(" | ", 1)[1].strip()
                if len(gloss.split()) >= 3:
                    glosses.append(gloss)
    return glosses


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("translation_en_xz")
    ap.add_argument("wordnet_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    synopses, sentences = debian_descriptions(args.translation_en_xz)
    glosses = wordnet_glosses(args.wordnet_dir)
    docs, seen = [], set()
    for text in sentences + glosses:
        key = text.lower()
        if key not in seen:
            seen.add(key)
            docs.append(text)
    candidates = sorted({s for s in synopses if len(s.split()) >= 2 and s.lower() not in seen})
    rng = random.Random(args.seed)
    queries = rng.sample(candidates, min(args.queries, len(candidates)))

    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "docs.jsonl"), "w", encoding="utf-8") as f:
        for i, text in enumerate(docs):
            f.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    with open(os.path.join(args.out_dir, "queries.jsonl"), "w", encoding="utf-8") as f:
        for i, text in enumerate(queries):
            f.write(json.dumps({"id": f"q{i}", "text": text}) + "\n")
    summary = {
        "documents": len(docs),
        "from_debian_sentences": len({s.lower() for s in sentences}),
        "from_wordnet_glosses": len(docs) - len({s.lower() for s in sentences}),
        "queries": len(queries),
        "seed": args.seed,
        "sources": {
            "debian": os.path.basename(args.translation_en_xz),
            "wordnet": "Debian wordnet-base (WordNet 3.0)",
        },
    }
    with open(os.path.join(args.out_dir, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
