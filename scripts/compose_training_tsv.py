#!/usr/bin/env python3
"""Turns `lexlip bench compose` shards into training pairs for `lexlip train --tsv`.

    compose_training_tsv.py --shards DIR --out DIR [--with TSV ...]

Extracts every KEY.jpg of the shards under DIR to OUT/images/ and writes OUT/train.tsv
(`title<TAB>filepath<TAB>image_id`, absolute paths): the rows of each --with TSV first (their
paths made absolute from the TSV's folder), then one row per composed picture with its caption.
So a model trains on single pictures and on pictures of several things at once. Reruns rewrite
the TSV and keep the extracted images.
"""
import argparse
import os
import sys
import tarfile


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shards", required=True, help="folder of NNNNN.tar shards")
    ap.add_argument("--out", required=True, help="folder for images/ and train.tsv")
    ap.add_argument("--with", dest="with_tsv", action="append", default=[],
                    help="a training TSV whose rows come first (repeatable)")
    args = ap.parse_args()
    shards = sorted(f for f in os.listdir(args.shards) if f.endswith(".tar"))
    if not shards:
        sys.exit(f"error: no .tar shards under {args.shards}: run `lexlip bench compose` first")
    images = os.path.abspath(os.path.join(args.out, "images"))
    os.makedirs(images, exist_ok=True)
    rows = []
    for with_tsv in args.with_tsv:
        base = os.path.dirname(os.path.abspath(with_tsv))
        with open(with_tsv, encoding="utf-8") as f:
            next(f)  # header
            for line in f:
                title, path, image_id = line.rstrip("\n").split("\t")
                rows.append((title, os.path.join(base, path), image_id))
    composed = 0
    for shard in shards:
        with tarfile.open(os.path.join(args.shards, shard)) as tar:
            captions = {}
            for member in tar.getmembers():
                key, _, ext = member.name.rpartition(".")
                if ext == "jpg":
                    target = os.path.join(images, member.name)
                    if not os.path.exists(target):
                        with open(target + ".part", "wb") as out:
                            out.write(tar.extractfile(member).read())
                        os.replace(target + ".part", target)
                elif ext == "txt":
                    captions[key] = " ".join(tar.extractfile(member).read().decode().split())
            for key in sorted(captions):
                rows.append((captions[key], os.path.join(images, key + ".jpg"), "compose/" + key))
                composed += 1
    tsv = os.path.join(args.out, "train.tsv")
    with open(tsv + ".part", "w", encoding="utf-8") as f:
        f.write("title\tfilepath\timage_id\n")
        for row in rows:
            f.write("\t".join(row) + "\n")
    os.replace(tsv + ".part", tsv)
    print(f"{tsv}: {len(rows) - composed} pairs from --with, {composed} composed", file=sys.stderr)


if __name__ == "__main__":
    main()
