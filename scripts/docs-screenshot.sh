#!/usr/bin/env bash
# Remakes docs/search-page.png: the demo collection (`lexlip demo`, 1,911 Noto emoji with the
# shipped model) searched for "a dog", as headless Chromium shows the page at 1200 × 820.
#
#   scripts/docs-screenshot.sh [LEXLIP_BINARY]      (default: target/release/lexlip)
#
# Needs chromium (Debian: apt-get install chromium) and the npm registry for the demo's first run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
lexlip="${1:-$root/target/release/lexlip}"
data="$root/target/docs-demo"
port=8097
"$lexlip" demo --data "$data" --model "$root/models/emoji-lex-imagenet" --no-serve
"$lexlip" serve --data "$data" --model "$root/models/emoji-lex-imagenet" --addr "127.0.0.1:$port" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.2; done
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,820 \
  --virtual-time-budget=8000 --screenshot="$root/docs/search-page.png" \
  "http://127.0.0.1:$port/?c=emoji&q=a+dog"
echo "wrote docs/search-page.png"
