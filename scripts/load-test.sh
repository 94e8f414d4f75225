#!/usr/bin/env bash
# Load test of `lexlip serve` over loopback with wrk (Debian package `wrk`):
#   1. sparse-vector queries against a synthetic collection (scripts/gen-synthetic-vectors.py),
#   2. text queries encoded by the tiny SPLADE model,
#   3. overload: many more connections than --max-in-flight → 503s, flat memory, recovery.
# Usage: scripts/load-test.sh DOCS.jsonl QUERIES.jsonl WORKDIR   (release binary must be built)
set -euo pipefail
docs=$1; queries=$2; work=$3
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/target/release/lexlip"
model="$(bash "$root/scripts/fetch-test-model.sh")"
mkdir -p "$work"
rss() { awk '/VmRSS/ {print $2/1024 " MiB"}' /proc/"$1"/status; }
hwm() { awk '/VmHWM/ {print $2/1024 " MiB"}' /proc/"$1"/status; }

if [ ! -f "$work/data/collections/synthetic/lexlip.json" ]; then
  /usr/bin/time -v "$bin" index --collection "$work/data/collections/synthetic" --vectors "$docs" --json \
    2> "$work/index.time" | tee "$work/index.json"
fi
"$bin" serve --data "$work/data" --text-model "$model" --addr 127.0.0.1:18181 > "$work/serve.out" 2> "$work/serve.err" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
sleep 3
echo "server RSS after start: $(rss $pid)"
url=http://127.0.0.1:18181
echo "== sparse queries, 1M-doc collection: 4 connections, 2 threads, 30 s"
wrk -t2 -c4 -d30s --latency -s "$root/scripts/wrk-bodies.lua" "$url/v1/collections/synthetic/search" -- "$queries" | grep -E 'RESULT|Non-2xx'
echo "server RSS: $(rss $pid), peak $(hwm $pid)"

echo "== text queries (tiny SPLADE encoder + search) on a small text collection"
curl -s -XPUT "$url/v1/collections/captions" -H 'content-type: application/json' -d '{}' > /dev/null
python3 - "$url" <<'PY'
import json, random, sys, urllib.request
random.seed(1)
words = "dog cat car man woman child grass street table bread red blue green runs sits plays sleeps on in with the a".split()
docs = [{"id": f"c{i}", "text": " ".join(random.choice(words) for _ in range(8))} for i in range(2000)]
for i in range(0, len(docs), 200):
    req = urllib.request.Request(sys.argv[1] + "/v1/collections/captions/documents",
        data=json.dumps({"documents": docs[i:i+200]}).encode(), headers={"content-type": "application/json"})
    urllib.request.urlopen(req).read()
with open("/tmp/lexlip-text-queries.jsonl", "w") as f:
    for i in range(500):
        q = " ".join(random.choice(words) for _ in range(5))
        f.write(json.dumps({"query": {"text": q}, "target": "text", "k": 10}) + "\n")
PY
wrk -t2 -c8 -d30s --latency -s "$root/scripts/wrk-bodies.lua" "$url/v1/collections/captions/search" -- /tmp/lexlip-text-queries.jsonl | grep -E 'RESULT|Non-2xx'
echo "server RSS: $(rss $pid), peak $(hwm $pid)"
curl -s "$url/metrics" | grep -E '^lexlip_encode_batch_size_(sum|count)'
kill $pid; wait $pid || true

echo "== overload: 256 connections against --max-in-flight 8"
"$bin" serve --data "$work/data" --addr 127.0.0.1:18182 --max-in-flight 8 > /dev/null 2>&1 &
pid=$!
sleep 3
before=$(rss $pid)
wrk -t2 -c256 -d20s -s "$root/scripts/wrk-bodies.lua" http://127.0.0.1:18182/v1/collections/synthetic/search -- "$queries" | grep -E 'RESULT|Non-2xx'
echo "RSS before: $before, after: $(rss $pid), peak $(hwm $pid)"
code=$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:18182/v1/collections/synthetic/search -H 'content-type: application/json' -d "$(head -1 "$queries")")
echo "first request after the overload: HTTP $code"
curl -s http://127.0.0.1:18182/metrics | grep -E '^lexlip_overload_rejections'
kill $pid; wait $pid || true
