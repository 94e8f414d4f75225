#!/usr/bin/env python3
"""Soak `lexlip serve` at a constant data size and watch its memory and latency.

    soak.py LEXLIP [--minutes 60] [--docs 100000] [--clients 6] [--sample-s 30]
            [--warmup-min 10] [--out samples.jsonl] [--data DIR]

Starts the server on a fresh data directory (or DIR) and a free port, fills two collections
with `--docs` documents between them (LexLIP-shaped sparse vectors of ~50 terms out of 30,000,
with text and metadata, sent precomputed so that no encoder's time is measured), then runs
`--clients` threads for `--minutes`: each step adds a batch of 50 new documents and deletes the
50 oldest of the same collection (the data size stays constant), searches both collections
(exact and approximate, with metadata filters and `explain`), and reads documents back. Every
`--sample-s` seconds it writes a line to `--out` (and stdout):

    {"t_min", "documents", "requests", "errors_5xx", "rss_mb", "heap_mb", "file_mb",
     "live_mb", "kept_free_mb", "pruning_mb", "segments", "stored_nnz", "p50_ms", "p99_ms"}

heap_mb is the server's anonymous resident memory (RssAnon: its heap and stacks), file_mb the
pages of mapped index files it has resident (RssFile), live_mb and kept_free_mb the allocator's
own figures from /metrics (bytes handed out, and freed bytes it keeps instead of returning
them: a leak grows the first, fragmentation the second), pruning_mb the heap the two
collections' pruning structures hold, segments and stored_nnz (non-zeros of live and deleted
documents not yet merged away) their shape, p50/p99 the search latency of that
interval. At the end it prints one JSON object: the heap's slope after `--warmup-min` (MB per
hour, least squares), the p99 of the first and last quarter after warm-up, the 5xx count, and
the heap per 100k documents and per concurrent request measured at the start (an empty server,
after the fill, and with the clients running). Exit status 1 when the heap grows by more than
10 MB per hour, p99 drifts by more than 20 %, or any request got a 5xx.
"""
import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from serve_probe import free_port, status as memory

VOCAB = 30_000
BATCH = 50


class Client:
    def __init__(self, base):
        self.base = base

    def call(self, method, path, body=None, timeout=60):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, None


def vector(rng, topic):
    """~50 terms: 20 of the document's topic (a band of the vocabulary), 30 anywhere."""
    terms = {}
    base = (topic * 300) % VOCAB
    for _ in range(20):
        terms[f"t{base + int(rng.expovariate(1 / 40)) % 300}"] = round(rng.uniform(0.2, 2.5), 3)
    for _ in range(30):
        terms[f"t{int(rng.paretovariate(1.1) * 10) % VOCAB}"] = round(rng.uniform(0.01, 0.8), 3)
    return terms


def doc(rng, key):
    topic = rng.randrange(100)
    return {
        "id": key,
        "text": f"document {key} about topic {topic}",
        "metadata": {"topic": topic, "shard": key[-1]},
        "vector": vector(rng, topic),
    }


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latencies = []
        self.requests = 0
        self.errors = 0

    def record(self, status, seconds=None):
        with self.lock:
            self.requests += 1
            if status >= 500:
                self.errors += 1
            if seconds is not None:
                self.latencies.append(seconds * 1000)

    def take(self):
        with self.lock:
            lat, self.latencies = sorted(self.latencies), []
            return lat, self.requests, self.errors


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def worker(client, name, queue, lock, stats, stop, seed):
    """Adds 50 new documents to `name` and deletes its 50 oldest, searches, reads back."""
    rng = random.Random(seed)
    counter = 0
    while not stop.is_set():
        counter += 1
        fresh = [doc(rng, f"{name}-{seed}-{counter}-{i}") for i in range(BATCH)]
        status, _ = client.call("POST", f"/v1/collections/{name}/documents", {"documents": fresh})
        stats.record(status)
        if status != 200:
            time.sleep(0.5)
            continue
        with lock:
            queue.extend(d["id"] for d in fresh)
            old = [queue.pop(0) for _ in range(BATCH)]
        for key in old:
            status, _ = client.call("DELETE", f"/v1/collections/{name}/documents/{key}")
            stats.record(status)
        for other in ("a", "b"):
            body = {
                "query": {"sparse": vector(rng, rng.randrange(100))},
                "k": 10,
                "exact": rng.random() < 0.5,
                "explain": rng.random() < 0.3,
            }
            if rng.random() < 0.3:
                body["filter"] = {"metadata": {"topic": rng.randrange(100)}}
            started = time.perf_counter()
            status, _ = client.call("POST", f"/v1/collections/{other}/search", body)
            stats.record(status, time.perf_counter() - started)
        status, _ = client.call("GET", f"/v1/collections/{name}/documents/{fresh[0]['id']}")
        stats.record(status)


def fill(client, name, count, queue, seed):
    rng = random.Random(seed)
    for start in range(0, count, 500):
        docs = [doc(rng, f"{name}-fill-{i}") for i in range(start, min(count, start + 500))]
        status, body = client.call("POST", f"/v1/collections/{name}/documents", {"documents": docs}, 600)
        if status != 200:
            sys.exit(f"filling {name}: {status} {body}")
        queue.extend(d["id"] for d in docs)


def allocator(client):
    """The server's allocator figures from /metrics, in MB: live allocations and kept free."""
    req = urllib.request.Request(client.base + "/metrics")
    with urllib.request.urlopen(req, timeout=60) as r:
        text = r.read().decode()
    found = {}
    for line in text.splitlines():
        for name in ("lexlip_heap_in_use_bytes", "lexlip_heap_free_bytes"):
            if line.startswith(name + " "):
                found[name] = round(float(line.split()[1]) / 2**20, 1)
    return found.get("lexlip_heap_in_use_bytes"), found.get("lexlip_heap_free_bytes")


def slope_per_hour(points):
    """Least-squares slope of (minutes, MB) points, in MB per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    var = sum((p[0] - mx) ** 2 for p in points)
    return 60 * sum((p[0] - mx) * (p[1] - my) for p in points) / var if var else 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("lexlip")
    p.add_argument("--minutes", type=float, default=60)
    p.add_argument("--docs", type=int, default=100_000)
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--sample-s", type=float, default=30)
    p.add_argument("--warmup-min", type=float, default=10)
    p.add_argument("--out", default="soak-samples.jsonl")
    p.add_argument("--data")
    args = p.parse_args()

    data = args.data or tempfile.mkdtemp(prefix="lexlip-soak-")
    port = free_port()
    server = subprocess.Popen(
        [args.lexlip, "serve", "--data", data, "--addr", f"127.0.0.1:{port}",
         "--max-in-flight", str(2 * args.clients + 2)],
        stdout=subprocess.DEVNULL,
    )
    client = Client(f"http://127.0.0.1:{port}")
    try:
        for _ in range(300):
            try:
                if client.call("GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        empty = memory(server.pid)
        queues = {"a": [], "b": []}
        for name in queues:
            client.call("PUT", f"/v1/collections/{name}", {})
            fill(client, name, args.docs // 2, queues[name], hash(name) & 0xFFFF)
        filled = memory(server.pid)
        stats, stop = Stats(), threading.Event()
        locks = {name: threading.Lock() for name in queues}
        threads = []
        for i in range(args.clients):
            name = "ab"[i % 2]
            t = threading.Thread(target=worker, args=(client, name, queues[name], locks[name], stats, stop, i), daemon=True)
            t.start()
            threads.append(t)
        started = time.time()
        samples = []
        with open(args.out, "w") as out:
            while time.time() - started < args.minutes * 60:
                time.sleep(args.sample_s)
                lat, requests, errors = stats.take()
                m = memory(server.pid)
                live, kept = allocator(client)
                infos = [client.call("GET", f"/v1/collections/{n}")[1] for n in queues]
                docs = sum(i["documents"] for i in infos)
                sample = {
                    "t_min": round((time.time() - started) / 60, 2),
                    "documents": docs,
                    "requests": requests,
                    "errors_5xx": errors,
                    "rss_mb": round(m["VmRSS"], 1),
                    "heap_mb": round(m["RssAnon"], 1),
                    "file_mb": round(m["RssFile"], 1),
                    "live_mb": live,
                    "kept_free_mb": kept,
                    "pruning_mb": round(sum(i["pruning_memory_bytes"] for i in infos) / 2**20, 1),
                    "segments": sum(i["segments"] for i in infos),
                    "stored_nnz": sum(i["nnz"] for i in infos),
                    "p50_ms": percentile(lat, 0.5) and round(percentile(lat, 0.5), 2),
                    "p99_ms": percentile(lat, 0.99) and round(percentile(lat, 0.99), 2),
                }
                samples.append(sample)
                line = json.dumps(sample)
                print(line, flush=True)
                out.write(line + "\n")
                out.flush()
        stop.set()
        for t in threads:
            t.join(timeout=120)
        steady = [s for s in samples if s["t_min"] >= args.warmup_min]
        quarter = max(1, len(steady) // 4)
        p99 = lambda part: sorted(s["p99_ms"] for s in part if s["p99_ms"] is not None)
        first, last = p99(steady[:quarter]), p99(steady[-quarter:])
        med = lambda v: v[len(v) // 2] if v else None
        running = samples[0]["heap_mb"] if samples else filled["RssAnon"]
        summary = {
            "minutes": args.minutes,
            "documents": args.docs,
            "clients": args.clients,
            "requests": stats.requests,
            "errors_5xx": stats.errors,
            "heap_slope_mb_per_h": round(slope_per_hour([(s["t_min"], s["heap_mb"]) for s in steady]), 1),
            "live_slope_mb_per_h": round(slope_per_hour([(s["t_min"], s["live_mb"]) for s in steady if s["live_mb"] is not None]), 1),
            "heap_mb": {"empty": round(empty["RssAnon"], 1), "filled": round(filled["RssAnon"], 1),
                        "first_sample": running, "last_sample": samples[-1]["heap_mb"] if samples else None},
            "heap_mb_per_100k_docs": round((filled["RssAnon"] - empty["RssAnon"]) * 100_000 / args.docs, 1),
            "heap_mb_per_concurrent_request": round(max(0.0, running - filled["RssAnon"]) / args.clients, 1),
            "p99_ms_first_quarter": med(first),
            "p99_ms_last_quarter": med(last),
        }
        print(json.dumps(summary))
        drift = (summary["p99_ms_last_quarter"] or 0) / (summary["p99_ms_first_quarter"] or 1) - 1
        ok = summary["heap_slope_mb_per_h"] <= 10 and drift <= 0.2 and stats.errors == 0
        return 0 if ok else 1
    finally:
        server.terminate()
        server.wait(timeout=30)
        if not args.data:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
