#!/usr/bin/env bash
# Builds bench/gemm_libraries.cc once per GEMM library with g++ (-O2 -march=x86-64-v3, as
# tinyddp) and prints float32 GFLOP/s per shape and library, one thread each: the table of
# docs/tensor.md ("Matmul"). Needs libeigen3-dev and libopenblas-dev (scripts/setup.sh), and
# for the other two columns libdnnl-dev and libblis-dev (apt-get install them; a library
# that is missing gets an empty column). Usage: bash bench/gemm_libraries.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 BLIS_NUM_THREADS=1
columns=()
for lib in eigen openblas dnnl blis; do
  case $lib in
    eigen) flags=(-DGEMM_EIGEN -I/usr/include/eigen3) ;;
    openblas) flags=(-DGEMM_OPENBLAS -lopenblas) ;;
    dnnl) flags=(-DGEMM_DNNL -ldnnl) ;;
    blis) flags=(-DGEMM_BLIS -lblis) ;;
  esac
  if g++ -O2 -march=x86-64-v3 -std=c++17 bench/gemm_libraries.cc -o "$out/$lib" "${flags[@]}" 2>"$out/$lib.err"; then
    "$out/$lib" >"$out/$lib.txt"
    columns+=("$lib")
  else
    echo "gemm_libraries: $lib did not build (installed?): $(head -1 "$out/$lib.err")" >&2
  fi
done
python3 - "$out" "${columns[@]}" <<'PY'
import sys
out, libs = sys.argv[1], sys.argv[2:]
table = {}
order = []
for lib in libs:
    for line in open(f"{out}/{lib}.txt"):
        shape, rate = line.rstrip("\n").split("\t")
        if shape not in table:
            order.append(shape)
        table.setdefault(shape, {})[lib] = rate
print("| shape (n x k x m) | " + " | ".join(libs) + " |")
print("|---|" + "---:|" * len(libs))
for shape in order:
    print(f"| {shape} | " + " | ".join(table[shape].get(lib, "") for lib in libs) + " |")
PY
