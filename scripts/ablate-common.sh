# Sourced by the ablate-*.sh scripts, first thing after `set -euo pipefail`, with the name of
# their default output folder under target/ and their own arguments:
#
#   source "$(dirname "$0")/ablate-common.sh" ablation-NAME "$@"
#
# Sets $root (the repository), $out (the script's first argument, default target/ablation-NAME;
# created), $model (models/emoji-tiny, where the arms start from) and emoji-env.sh's $lexlip and
# $corpus (checked; the corpus built on first use).
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${2:-$root/target/$1}"
model="$root/models/emoji-tiny"
source "$root/scripts/emoji-env.sh"
mkdir -p "$out"

# eval_single_modal DIR MODEL [ARGS...]: writes DIR/eval.json, unless it is there already: MODEL
# evaluated (with ARGS) on the unseen-concept test split, image→image and text→text included.
eval_single_modal() {
  local dir="$1" evaluated="$2"
  shift 2
  [ -s "$dir/eval.json" ] || "$lexlip" eval --model "$evaluated" "$@" --tsv "$corpus/test.tsv" \
    --max-length 24 --single-modal --json > "$dir/eval.json"
}
