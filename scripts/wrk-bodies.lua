-- wrk script: POSTs JSON bodies read from a file (one per line), cycling through them.
-- Usage: wrk -s scripts/wrk-bodies.lua URL -- BODIES.jsonl
local bodies = {}
local i = 0

function init(args)
  for line in io.lines(args[1]) do
    bodies[#bodies + 1] = line
  end
end

function request()
  i = i % #bodies + 1
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, bodies[i])
end

function done(summary, latency, requests)
  io.write(string.format(
    "RESULT requests=%d errors_status=%d errors_timeout=%d p50_ms=%.2f p99_ms=%.2f rps=%.1f\n",
    summary.requests, summary.errors.status, summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.requests / (summary.duration / 1e6)))
end
