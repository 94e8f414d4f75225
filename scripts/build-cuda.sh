#!/usr/bin/env bash
# Builds `lexlip` with `--features cuda` on a machine without a GPU or a CUDA install: the CUDA 13.0
# compiler, headers and libraries come from NVIDIA's PyPI wheels (pinned below), and the driver
# library the linker wants (libcuda.so.1, which only a GPU driver installs) is a stub made here
# from the symbols cudarc declares. The binary runs where a driver for CUDA ≥ 13.0 (R580+) and the
# CUDA 13 runtime libraries (libcudart, libcublas, libcublasLt, libcurand) are installed.
#
#   scripts/build-cuda.sh [extra cargo args]     (binary: target/cuda/release/lexlip)
#   scripts/build-cuda.sh --check                (CI: `cargo check` of the cuda feature in
#                                                 target/, compiler and headers only)
#
# Environment: CUDA_COMPUTE_CAP (default 90: H100/H200; 80 = A100, 89 = L4/RTX 40xx) picks the
# GPU generation of the statically compiled kernels; the other kernels ship as PTX, which the
# driver compiles for whatever GPU it finds. About 15 minutes on 2 cores from clean.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
toolkit="${LEXLIP_CUDA_TOOLKIT:-$root/target/cuda-toolkit}"
check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi

# The compiler and headers; the libraries only to link a binary.
wheels=("nvidia-cuda-nvcc==13.0.88" "nvidia-cuda-crt==13.0.88" "nvidia-nvvm==13.0.88"
  "nvidia-cuda-runtime==13.0.96" "nvidia-cuda-cccl==13.0.85")
[ "$check" = 1 ] || wheels+=("nvidia-cuda-nvrtc==13.0.88" "nvidia-cublas==13.0.2.14" "nvidia-curand==10.4.5.25")
if [ ! -x "$toolkit/venv/bin/python" ]; then
  python3 -m venv "$toolkit/venv"
fi
echo "build-cuda: CUDA 13.0 wheels in $toolkit/venv" >&2
"$toolkit/venv/bin/pip" install -q --disable-pip-version-check "${wheels[@]}"
cuda="$(echo "$toolkit"/venv/lib/python3*/site-packages/nvidia/cu13)"
[ -x "$cuda/bin/nvcc" ] || { echo "build-cuda: no nvcc under $cuda" >&2; exit 1; }
export CUDA_HOME="$cuda" CUDA_PATH="$cuda" PATH="$cuda/bin:$PATH"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
cd "$root"

if [ "$check" = 1 ]; then
  # Type-checks everything the feature touches (candle's CUDA backend, its kernels compiled by
  # nvcc, lexlip's --gpu paths) in target/, next to the non-CUDA artifacts; nothing is linked.
  cargo check -p lexlip-server --features cuda --bin lexlip "$@"
  exit
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/cuda}"

# The linker resolves -lcublas etc. through unversioned names, which the wheels do not ship.
for lib in cublas cublasLt cudart nvrtc; do ln -sf "lib$lib.so.13" "$cuda/lib/lib$lib.so"; done
ln -sf libcurand.so.10 "$cuda/lib/libcurand.so"

# libcuda stub: every driver function cudarc may call, as an empty function, under the real
# library's soname so that the binary loads the installed driver at run time.
stubs="$toolkit/stubs"
if [ ! -f "$stubs/libcuda.so" ]; then
  (cd "$root" && cargo fetch --quiet)
  cudarc="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-* | sort -V | tail -1)"
  mkdir -p "$stubs"
  grep -oE '^pub unsafe fn cu[A-Za-z0-9_]+' "$cudarc/src/driver/sys/mod.rs" | awk '{print $4}' |
    sort -u | sed 's/.*/void &(void) {}/' > "$stubs/libcuda.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$stubs/libcuda.so" "$stubs/libcuda.c"
fi

export LIBRARY_PATH="$stubs:$cuda/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
export RUSTFLAGS="${RUSTFLAGS:-} -L $stubs -L $cuda/lib"
export CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=true
cargo build --release -p lexlip-server --features cuda --bin lexlip "$@"
echo "build-cuda: $CARGO_TARGET_DIR/release/lexlip (run it with the CUDA 13 libraries on LD_LIBRARY_PATH)" >&2
