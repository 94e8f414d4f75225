#!/usr/bin/env bash
# Every encoder tower lexlip ships or loads, timed against PyTorch in one run: the same
# architectures and random weights (the directories scripts/bench_encoders_torch.py writes,
# loaded by both), the same captions and pixels, the same batch sizes, f32, on this machine's CPU
# cores, alternating ROUNDS times; prints items/s and lexlip's ratio to PyTorch (lexlip/s ÷
# torch/s, the median of the rounds).
#
#   scripts/bench-encoders-vs-torch.sh [--out DIR] [--rounds 2] [--seconds 5] [--batch-sizes 1,32]
#                                      [--towers bert-tiny,bert-base,beit-base,clip-b32,mobilenet-v2,mobileclip-s1]
#
# Towers: bert-tiny (the real tiny SPLADE model, scripts/fetch-test-model.sh) and bert-base, text
# with the MLM head; beit-base, BEiT-B/16 at 224 px with the MLM head over BERT's 30,522 word
# pieces (LexLIP's image tower); clip-b32, CLIP ViT-B/32 at 224 px, both towers; mobilenet-v2,
# the image side of a `lexlip-fused` model of the demo's shape (a small BEiT teacher at 64 px,
# MobileNetV2 at 224 px, an MLP adapter: lexlip loads a MobileNetV2 only there);
# mobileclip-s1, open_clip's MobileCLIP-S1 (FastViT MCi1 at 256 px), both towers.
# What is timed is `lexlip bench encode`'s work (server/src/cli/bench_encode.rs): texts from
# tokenisation to sparse lexicons or unit embeddings; images from preprocessed pixels (decoding
# and resizing outside the timing on both sides) to the same. The header of
# scripts/bench_encoders_torch.py says what the PyTorch side runs for each tower.
#
# Needs, outside the repository (never in CI): a Python with torch, torchvision, transformers
# 4.x, safetensors, tokenizers, open_clip_torch and timm (no pretrained weights are fetched):
#   PYTHON=/tmp/venv-torch/bin/python scripts/bench-encoders-vs-torch.sh
# `cargo build --release` first (target/release/lexlip is timed). Nothing else heavy should run.
# ----
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/target/bench-encoders"
towers="bert-tiny,bert-base,beit-base,clip-b32,mobilenet-v2,mobileclip-s1"
source "$root/scripts/vs-torch-args.sh"
vs_torch_args "$@"
for round in $(seq 1 "$rounds"); do
  echo "round $round: PyTorch (builds the models on its first round)" >&2
  "$python" "$root/scripts/bench_encoders_torch.py" --out "$out/models" --splade "$splade" \
    --towers "$towers" --batch-sizes "$batches" --seconds "$seconds" \
    > "$out/runs/torch-$round.json"
  for tower in ${towers//,/ }; do
    model="$out/models/$tower"
    [ "$tower" = bert-tiny ] && model="$splade"
    echo "round $round: lexlip $tower" >&2
    "$lexlip" bench encode --model "$model" --batch-sizes "$batches" --seconds "$seconds" \
      --dtype f32 --json > "$out/runs/lexlip-$tower-$round.json"
  done
done
"$python" - "$out/runs" "$rounds" "$towers" <<'PY'
import json, statistics, sys
from pathlib import Path
runs, rounds, towers = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(",")
rows = {}
info = set()
for r in range(1, rounds + 1):
    torch = json.loads((runs / f"torch-{r}.json").read_text())
    info.add((torch["torch"], torch["threads"]))
    for tower in towers:
        ours = json.loads((runs / f"lexlip-{tower}-{r}.json").read_text())
        info.add(("lexlip", ours["threads"]))
        for side, theirs in torch["towers"][tower].items():
            # A dense-only model reports its towers as dense_text / dense_image.
            mine = ours[side] or ours[f"dense_{side}"]
            for batch, their in theirs:
                my = next(x["items_per_s"] for x in mine if x["batch"] == batch)
                rows.setdefault((towers.index(tower), tower, side, batch), []).append((my, their))
for what, threads in sorted(info, key=str):
    print(f"# {what}: {threads} threads" if what == "lexlip" else f"# torch {what}: {threads} threads")
print(f"{'tower':<14} {'side':<6} {'batch':>5} {'lexlip/s':>9} {'torch/s':>9} {'ratio':>6}")
for (_, tower, side, batch), pairs in sorted(rows.items()):
    mine = statistics.median(p[0] for p in pairs)
    theirs = statistics.median(p[1] for p in pairs)
    print(f"{tower:<14} {side:<6} {batch:>5} {mine:>9.2f} {theirs:>9.2f} {mine / theirs:>5.2f}x")
PY
