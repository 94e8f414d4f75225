# Sourced by the scripts that time lexlip against PyTorch (bench-published-vs-torch.sh,
# bench-encoders-vs-torch.sh): their shared options and the release binary they time.
# `vs_torch_args "$@"` sets rounds, seconds, batches, out (the caller's default kept) and towers
# (only where the caller gave it a default), prints the caller's header on -h, sets lexlip to
# target/release/lexlip, refusing to go on without it, and python to $PYTHON (python3), and
# makes OUT/runs for the rounds' JSON; splade is the tiny SPLADE test model (its directory),
# whose tokenizer.json both benchmarks read.
vs_torch_args() {
  rounds=2
  seconds=5
  batches="1,32"
  while [ $# -gt 0 ]; do
    case "$1" in
      --out) out="$2"; shift 2 ;;
      --rounds) rounds="$2"; shift 2 ;;
      --seconds) seconds="$2"; shift 2 ;;
      --batch-sizes) batches="$2"; shift 2 ;;
      --towers)
        [ -n "${towers:-}" ] || { echo "error: unknown option $1" >&2; exit 2; }
        towers="$2"; shift 2 ;;
      -h|--help) sed -n '2,/^# ----$/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
      *) echo "error: unknown option $1" >&2; exit 2 ;;
    esac
  done
  lexlip="$root/target/release/lexlip"
  if [ ! -x "$lexlip" ]; then
    echo "error: $lexlip is missing: build it first (cargo build --release --bin lexlip)" >&2
    exit 1
  fi
  python="${PYTHON:-python3}"
  mkdir -p "$out/runs"
  splade="$(bash "$root/scripts/fetch-test-model.sh")"
}
