# Sourced by the emoji training and ablation scripts, with $root set to the repository: sets
# $lexlip (the release binary, or $LEXLIP; checked) and $corpus (the emoji corpus, built on
# first use into target/data/emoji-corpus, or $LEXLIP_EMOJI_CORPUS when it exists elsewhere).
lexlip="${LEXLIP:-$root/target/release/lexlip}"
corpus="${LEXLIP_EMOJI_CORPUS:-$root/target/data/emoji-corpus}"
if [ ! -x "$lexlip" ]; then
  echo "error: no lexlip binary at $lexlip: run cargo build --release or set LEXLIP" >&2
  exit 1
fi
# With $holdout_style set (e.g. twitter), the corpus is built with that art style held out.
if [ -n "${holdout_style:-}" ]; then
  [ -f "$corpus/train-holdout-$holdout_style.tsv" ] ||
    "$root/scripts/build-emoji-corpus.sh" --out "$corpus" --holdout-style "$holdout_style"
else
  [ -f "$corpus/train.tsv" ] || "$root/scripts/build-emoji-corpus.sh" --out "$corpus"
fi
