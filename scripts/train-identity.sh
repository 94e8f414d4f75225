#!/usr/bin/env bash
# Behaviour unchanged across a refactor of the training crate: trains every objective for a few
# steps with two lexlip binaries (each from its own checkout, which supplies the models and test
# models it loads) and compares the SHA-256 of every weight file the runs export.
#
#   scripts/train-identity.sh BIN_A ROOT_A BIN_B ROOT_B [OUT]
#
# ROOT_*: the checkout whose models/, target/test-models/ (scripts/fetch-test-model.sh,
# scripts/fetch-image-backbone.sh) and target/data/emoji-corpus (scripts/build-emoji-corpus.sh)
# that binary reads. Prints one line per objective ("same" or "DIFFERENT") and exits 1 when any
# differs. Runs on the CPU in a few minutes.
set -euo pipefail

if [ $# -lt 4 ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
bin_a=$1 root_a=$2 bin_b=$3 root_b=$4
out=${5:-$(mktemp -d)}
mkdir -p "$out"

# 64 pairs of the emoji corpus's test split.
corpus() {
  head -65 "$1/target/data/emoji-corpus/test.tsv" > "$2"
}

# The training runs, each 3-4 steps, for binary $1 with checkout $2 into $3.
runs() {
  local bin=$1 root=$2 dir=$3
  local tsv=$dir/pairs.tsv models=$root/models tm=$root/target/test-models
  mkdir -p "$dir"
  corpus "$root" "$tsv"
  local common=(--tsv "$tsv" --images-root "$root/target/data/emoji-corpus" --seed 7 --json)
  "$bin" train "${common[@]}" --text-init "$tm/splade-tiny" --image-config tiny \
    --patch-size 16 --max-length 24 --batch-size 8 --steps 3 --out "$dir/lexlip" > /dev/null
  "$bin" train "${common[@]}" --objective dense --tokenizer "$tm/splade-tiny/tokenizer.json" \
    --dense-dim 16 --image-config tiny --image-size 32 --patch-size 8 --max-length 12 \
    --batch-size 4 --steps 3 --out "$dir/dense" > /dev/null
  "$bin" train "${common[@]}" --objective heads --backbone "$models/emoji-dense" \
    --max-length 12 --batch-size 4 --steps 4 --image-top-k 8 --text-top-k 4 \
    --out "$dir/heads" > /dev/null
  "$bin" train "${common[@]}" --objective adapter --backbone "$models/emoji-dense" \
    --image-backbone "$tm/mobilenet-v2" --image-backbone-size 64 --batch-size 8 --steps 3 \
    --out "$dir/adapter" > /dev/null
  "$bin" train "${common[@]}" --objective rerank --init "$models/emoji-tiny" --max-length 24 \
    --batch-size 8 --steps 3 --rerank-negatives 4 --out "$dir/rerank" > /dev/null
}

runs "$bin_a" "$root_a" "$out/a"
runs "$bin_b" "$root_b" "$out/b"

status=0
for objective in lexlip dense heads adapter rerank; do
  sums() { (cd "$1/$objective" && find . -name '*.safetensors' -not -path './checkpoints/*' |
    sort | xargs sha256sum); }
  if [ -n "$(sums "$out/a")" ] && [ "$(sums "$out/a")" = "$(sums "$out/b")" ]; then
    echo "$objective: same ($(sums "$out/a" | wc -l) weight files)"
  else
    echo "$objective: DIFFERENT"
    diff <(sums "$out/a") <(sums "$out/b") || true
    status=1
  fi
done
exit $status
