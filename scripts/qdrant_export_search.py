#!/usr/bin/env python3
"""Loads a `lexlip export --format qdrant` file into Qdrant's local mode and runs one query.

Used by server/tests/cli_export.rs to check that the export ranks in a real engine as lexlip
does. Prints {"hits": [[doc id, score], ...]} (the lexlip document id from the payload).

    qdrant_export_search.py POINTS.jsonl VOCAB.txt '{"dog": 3, "grass": 1}' K [NAME]
"""
import json
import sys

from qdrant_client import QdrantClient, models


def main():
    points_path, vocab_path, query, k = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
    name = sys.argv[5] if len(sys.argv) > 5 else "lexlip"
    ids = {t: i for i, t in enumerate(open(vocab_path, encoding="utf-8").read().split("\n"))}
    client = QdrantClient(":memory:")
    client.create_collection(
        "export", vectors_config={}, sparse_vectors_config={name: models.SparseVectorParams()}
    )
    points = []
    for line in open(points_path, encoding="utf-8"):
        p = json.loads(line)
        v = p["vector"][name]
        points.append(models.PointStruct(
            id=p["id"], payload=p["payload"],
            vector={name: models.SparseVector(indices=v["indices"], values=v["values"])},
        ))
    client.upsert("export", points=points)
    terms = sorted((ids[t], float(w)) for t, w in query.items())
    found = client.query_points(
        "export", query=models.SparseVector(indices=[t for t, _ in terms], values=[w for _, w in terms]),
        using=name, limit=k, with_payload=True,
    ).points
    print(json.dumps({"hits": [[p.payload["id"], p.score] for p in found]}))


if __name__ == "__main__":
    main()
