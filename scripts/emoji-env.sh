# Sourced by the emoji training and ablation scripts, with $root set to the repository: sets
# $lexlip (the release binary, or $LEXLIP; checked), $corpus (the emoji corpus, built on first
# use into target/data/emoji-corpus, or $LEXLIP_EMOJI_CORPUS when it exists elsewhere) and
# $train_tsv (below).
lexlip="${LEXLIP:-$root/target/release/lexlip}"
corpus="${LEXLIP_EMOJI_CORPUS:-$root/target/data/emoji-corpus}"
if [ ! -x "$lexlip" ]; then
  echo "error: no lexlip binary at $lexlip: run cargo build --release or set LEXLIP" >&2
  exit 1
fi
# With $holdout_style set (e.g. twitter), the corpus is built with that art style held out and
# $train_tsv is its training split without that style; else $train_tsv is train.tsv.
if [ -n "${holdout_style:-}" ]; then
  train_tsv="$corpus/train-holdout-$holdout_style.tsv"
  [ -f "$train_tsv" ] ||
    "$root/scripts/build-emoji-corpus.sh" --out "$corpus" --holdout-style "$holdout_style"
else
  train_tsv="$corpus/train.tsv"
  [ -f "$train_tsv" ] || "$root/scripts/build-emoji-corpus.sh" --out "$corpus"
fi
