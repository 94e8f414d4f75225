#!/usr/bin/env python3
"""Synthetic WebDataset shards for measuring `lexlip train --webdataset` memory at scale.

    python3 scripts/gen-synthetic-webdataset.py N OUT_DIR

writes N samples (`KEY.png` + `KEY.txt`), 10,000 per shard `OUT_DIR/00000.tar`, … The pictures
are 256 distinct 16 × 16 noise PNGs (about 900 bytes each) reused in turn; each caption names
three of sixteen words. Deterministic: the same N gives the same bytes. Standard library only.
"""

import io
import os
import random
import struct
import sys
import tarfile
import zlib

PER_SHARD = 10_000
WORDS = "red blue green cat dog car tree house sun moon star heart pizza rocket fish bird".split()


def png(seed):
    r = random.Random(seed)
    w = h = 16
    raw = b"".join(b"\x00" + bytes(r.randrange(256) for _ in range(w * 3)) for _ in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b"")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    n, out = int(sys.argv[1]), sys.argv[2]
    os.makedirs(out, exist_ok=True)
    images = [png(i) for i in range(256)]
    for start in range(0, n, PER_SHARD):
        with tarfile.open(os.path.join(out, f"{start // PER_SHARD:05d}.tar"), "w", format=tarfile.GNU_FORMAT) as t:
            for i in range(start, min(n, start + PER_SHARD)):
                key = f"{i:09d}"
                r = random.Random(i)
                caption = f"a {r.choice(WORDS)} {r.choice(WORDS)} and a {r.choice(WORDS)}".encode()
                for name, data in ((f"{key}.png", images[i % 256]), (f"{key}.txt", caption)):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    info.mtime = 0
                    t.addfile(info, io.BytesIO(data))
    print(out)


if __name__ == "__main__":
    main()
