#!/usr/bin/env python3
"""Serve one collection with `lexlip serve` and measure what a user of the server sees.

    serve_probe.py LEXLIP COLLECTION_DIR MODEL_DIR sparse|dense CAPTIONS.txt [--queries N]
                   [--exact]

Starts the server on a free port over a data directory holding only COLLECTION_DIR (linked),
then sends text→image searches (the first N captions of CAPTIONS.txt, one per line) one after
the other, in the given mode (`--exact`: dense searches scan every vector instead of walking the
HNSW graphs). Prints one JSON object:

- ready_s: from the start of the process until /readyz answers 200;
- first_answer_s: from the start of the process until the first search has answered (for a
  dense collection: the time until the dense path answers after a restart);
- ms_per_query: mean wall time of the searches after the first, HTTP and query encoding
  included;
- rss_mb, rss_anon_mb, rss_file_mb: the server's resident memory after the searches (all of
  it, its heap, and the pages of mapped index files).
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1024
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    args = sys.argv[1:]
    queries = 200
    exact = "--exact" in args
    if exact:
        args.remove("--exact")
    if "--queries" in args:
        i = args.index("--queries")
        queries = int(args[i + 1])
        del args[i : i + 2]
    if len(args) != 5 or args[3] not in ("sparse", "dense"):
        sys.exit(__doc__)
    lexlip, collection, model, mode, captions = args
    texts = [l.strip() for l in open(captions, encoding="utf-8") if l.strip()][:queries]
    if not texts:
        sys.exit(f"error: no captions in {captions}")
    data = tempfile.mkdtemp(prefix="lexlip-serve-probe-")
    try:
        os.makedirs(os.path.join(data, "collections"))
        name = "probe"
        os.symlink(os.path.abspath(collection), os.path.join(data, "collections", name))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        start = time.monotonic()
        server = subprocess.Popen(
            [lexlip, "serve", "--data", data, "--model", model, "--addr", f"127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            ready = None
            while ready is None:
                if server.poll() is not None:
                    sys.exit(f"error: lexlip serve exited with {server.returncode}")
                try:
                    urllib.request.urlopen(base + "/readyz", timeout=5).read()
                    ready = time.monotonic() - start
                except OSError:
                    time.sleep(0.05)

            def search(text):
                body = {"query": {"text": text}, "target": "image", "k": 10, "mode": mode}
                if exact:
                    body["exact"] = True
                request = urllib.request.Request(
                    f"{base}/v1/collections/{name}/search",
                    data=json.dumps(body).encode(),
                    headers={"content-type": "application/json"},
                )
                return json.loads(urllib.request.urlopen(request, timeout=600).read())

            search(texts[0])
            first = time.monotonic() - start
            t = time.monotonic()
            for text in texts[1:]:
                search(text)
            per_query = (time.monotonic() - t) * 1e3 / max(1, len(texts) - 1)
            mem = status(server.pid)
        finally:
            server.terminate()
            server.wait()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    print(
        json.dumps(
            {
                "mode": mode,
                "exact": exact,
                "queries": len(texts),
                "ready_s": round(ready, 3),
                "first_answer_s": round(first, 3),
                "ms_per_query": round(per_query, 3),
                "rss_mb": round(mem.get("VmRSS", 0), 1),
                "rss_anon_mb": round(mem.get("RssAnon", 0), 1),
                "rss_file_mb": round(mem.get("RssFile", 0), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
