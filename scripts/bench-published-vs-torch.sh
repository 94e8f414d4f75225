#!/usr/bin/env bash
# The published photo models (VDR cross-modal; D2S over BLIP), encode speed in one run: the
# authors' PyTorch code (scripts/bench_published_torch.py) and `lexlip bench encode` on the same
# random-weight models of the published shapes, the same captions and batch sizes, on this
# machine's cores, alternating ROUNDS times; prints texts/s and images/s and lexlip's ratio to
# PyTorch (the median of the rounds).
#
#   scripts/bench-published-vs-torch.sh [--out DIR] [--rounds 2] [--seconds 5] [--batch-sizes 1,32]
#
# Needs, outside the repository (never in CI): a Python with torch, torchvision, safetensors,
# pillow and transformers 4.x (the references were written for it), and the two reference
# repositories checked out:
#   git clone https://github.com/jzhoubu/vsearch /tmp/vsearch               # 2496bf9 used
#   git clone https://github.com/thongnt99/lsr-multimodal /tmp/lsr-multimodal   # ae7ac1e used
#   PYTHON=/tmp/venv-ref/bin/python VSEARCH=/tmp/vsearch LSR=/tmp/lsr-multimodal \
#     scripts/bench-published-vs-torch.sh
# `cargo build --release` first (target/release/lexlip is timed).
# ----
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/target/bench-published"
source "$root/scripts/vs-torch-args.sh"
vs_torch_args "$@"
for round in $(seq 1 "$rounds"); do
  echo "round $round: PyTorch (builds the models on its first round)" >&2
  "$python" "$root/scripts/bench_published_torch.py" --out "$out/models" \
    --tokenizer "$splade/tokenizer.json" --batch-sizes "$batches" --seconds "$seconds" \
    > "$out/runs/torch-$round.json"
  if [ ! -d "$out/models/d2s-pair" ]; then
    "$lexlip" model pair --heads "$out/models/d2s" --dense "$out/models/blip" \
      --out "$out/models/d2s-pair" >&2
  fi
  for model in vdr d2s-pair; do
    echo "round $round: lexlip $model" >&2
    "$lexlip" bench encode --model "$out/models/$model" --batch-sizes "$batches" \
      --seconds "$seconds" --json > "$out/runs/lexlip-$model-$round.json"
  done
done
"$python" - "$out/runs" "$rounds" <<'PY'
import json, statistics, sys
from pathlib import Path
runs, rounds = Path(sys.argv[1]), int(sys.argv[2])
rows = {}
for r in range(1, rounds + 1):
    torch = json.loads((runs / f"torch-{r}.json").read_text())
    for model, dirname in (("vdr", "vdr"), ("d2s", "d2s-pair")):
        ours = json.loads((runs / f"lexlip-{dirname}-{r}.json").read_text())
        for side in ("text", "image"):
            for batch, theirs in torch["models"][model][side]:
                mine = next(x["items_per_s"] for x in ours[side] if x["batch"] == batch)
                rows.setdefault((model, side, batch), []).append((mine, theirs))
print(f"{'model':<5} {'side':<6} {'batch':>5} {'lexlip/s':>9} {'torch/s':>9} {'ratio':>6}")
for (model, side, batch), pairs in sorted(rows.items()):
    mine = statistics.median(p[0] for p in pairs)
    theirs = statistics.median(p[1] for p in pairs)
    print(f"{model:<5} {side:<6} {batch:>5} {mine:>9.2f} {theirs:>9.2f} {mine / theirs:>5.2f}x")
PY
