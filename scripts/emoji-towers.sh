# Sourced by the scripts that train both towers of a tiny model on the emoji corpus
# (train-emoji-model.sh, train-lexicon-model.sh), with $root set (and $holdout_style where an art
# style is held out): emoji-env.sh's variables, then $splade (the tiny SPLADE text model, fetched
# on first use) and $gpu (--gpu with LEXLIP_GPU=1, else nothing).
source "$root/scripts/emoji-env.sh"
splade="$("$root/scripts/fetch-test-model.sh")"
gpu=()
if [ "${LEXLIP_GPU:-0}" = 1 ]; then
  gpu=(--gpu)
fi

# train_towers TSV ARGS...: lexlip train on TSV, the text tower from $splade, a tiny image tower
# (16-pixel patches) and its head from scratch, captions cut at 24 tokens; then ARGS.
train_towers() {
  local tsv="$1"
  shift
  "$lexlip" train --tsv "$tsv" --text-init "$splade" \
    --image-config tiny --patch-size 16 --max-length 24 --image-head-init random "$@"
}
