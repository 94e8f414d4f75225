#!/usr/bin/env bash
# Training throughput of `lexlip train` (Candle, CPU) against a PyTorch baseline measured in the
# same run: phase 1 (SelfMLM + LexMLM + BaCo) of the tiny model (text BERT 2 × 128 over 30,522
# word pieces, image BEiT `tiny` preset at 64 px, two 2-layer LexMLM decoders), batch 32, 40
# tokens, AdamW with clipping, 2 threads each, random initialisation.
#
#   lexlip: a synthetic corpus of the same shape (64 px noise PNGs, captions truncated to exactly
#           40 tokens), WARMUP + STEPS steps with --json; reports Summary.samples_per_s (all
#           steps, data thread included) and the steady rate over the last STEPS steps (from the
#           per-step `elapsed_s`).
#   torch:  scripts/bench_train_torch.py, fixed synthetic batches, STEPS steps timed after WARMUP.
#
# Usage: scripts/bench-train.sh [STEPS [WARMUP]]            (defaults 20 and 2)
#   SIZE=tiny|base          tower presets of both (default tiny; base = BERT-base + BEiT-B/16 at
#                           224 px, random init); BATCH=N the batch size (default 32)
#   LEXLIP=path/to/lexlip   a release binary (default: cargo build --release, target/release/lexlip)
#   PYTHON=path/to/python   with torch (default: .venv-torch/bin/python; see make_train_fixtures.py)
#   GPU=1                   both on the GPU (lexlip --gpu from scripts/build-cuda.sh, torch cuda)
#   TOKENIZER=tokenizer.json  instead of the tiny SPLADE model's (offline machines)
# Prints one JSON object: both rates and lexlip/torch ratios. Nothing is kept (a temp directory).
set -euo pipefail
steps=${1:-20}
warmup=${2:-2}
size=${SIZE:-tiny}
batch=${BATCH:-32}
max_length=40
threads=2
root="$(cd "$(dirname "$0")/.." && pwd)"
python=${PYTHON:-$root/.venv-torch/bin/python}
"$python" -c 'import torch' 2>/dev/null || {
  echo "no torch in $python: set PYTHON, or make .venv-torch (see scripts/make_train_fixtures.py)" >&2
  exit 2
}
if [ -z "${LEXLIP:-}" ]; then
  (cd "$root" && cargo build --release -p lexlip-server --bin lexlip >&2)
  LEXLIP="$root/target/release/lexlip"
fi
tokenizer="${TOKENIZER:-$(bash "$root/scripts/fetch-test-model.sh")/tokenizer.json}"
gpu=() device=cpu
[ "${GPU:-0}" = 1 ] && gpu=(--gpu) device=cuda
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== synthetic corpus ($((8 * batch)) pairs)" >&2
python3 - "$tokenizer" "$work/corpus" $((8 * batch)) <<'PY'
import json, os, random, struct, sys, zlib
tok, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(out, exist_ok=True)
vocab = json.load(open(tok))["model"]["vocab"]
# Whole words (one word piece each), so 45 of them give more than 40 tokens.
words = [w for w in vocab if w.isalpha() and w.isascii() and len(w) >= 3]
rng = random.Random(7)

def png(path, size=64):
    raw = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(3 * size)) for _ in range(size))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    ihdr = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

with open(os.path.join(out, "corpus.jsonl"), "w") as f:
    for i in range(n):
        png(os.path.join(out, f"{i}.png"))
        text = " ".join(rng.choice(words) for _ in range(45))
        f.write(json.dumps({"id": f"p{i}", "image": f"{i}.png", "text": text}) + "\n")
PY

echo "== lexlip train ($warmup + $steps steps)" >&2
RAYON_NUM_THREADS=$threads "$LEXLIP" train --manifest "$work/corpus/corpus.jsonl" \
  --tokenizer "$tokenizer" --text-config "$size" --image-config "$size" \
  --batch-size $batch --max-length $max_length --steps $((warmup + steps)) \
  --log-every 1 --checkpoint-every $((warmup + steps)) --json "${gpu[@]}" --out "$work/out" \
  > "$work/lexlip.jsonl"

echo "== pytorch ($warmup + $steps steps)" >&2
"$python" "$root/scripts/bench_train_torch.py" --steps "$steps" --warmup "$warmup" \
  --batch-size $batch --max-length $max_length --threads $threads --size "$size" --device $device > "$work/torch.json"

python3 - "$work/lexlip.jsonl" "$work/torch.json" "$warmup" "$steps" "$batch" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
torch = json.load(open(sys.argv[2]))
warmup, steps, batch = map(int, sys.argv[3:6])
summary = next(l["summary"] for l in lines if "summary" in l)
elapsed = {l["step"]: l["elapsed_s"] for l in lines if "step" in l}
if summary["steps_done"] != warmup + steps or len(elapsed) != warmup + steps:
    sys.exit(f"lexlip train did {summary['steps_done']} steps, {len(elapsed)} logged")
# Steps warmup+1 .. warmup+steps: from the end of step `warmup` (0 = the run's start).
steady = steps * batch / (elapsed[warmup + steps] - elapsed.get(warmup, 0.0))
lexlip = {
    "samples_per_s": summary["samples_per_s"],
    "steady_samples_per_s": steady,
    "seconds": summary["seconds"],
    "loss_first": next(l["loss"] for l in lines if "step" in l),
    "loss_last": summary["last"]["loss"],
}
print(json.dumps({
    "size": torch.get("size"),
    "steps": steps, "warmup_steps": warmup, "batch_size": batch,
    "lexlip": lexlip,
    "torch": torch,
    "lexlip_over_torch": summary["samples_per_s"] / torch["samples_per_s"],
    "steady_lexlip_over_torch": steady / torch["samples_per_s"],
}, indent=2))
PY
