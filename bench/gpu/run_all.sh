#!/usr/bin/env bash
# GPU check in one command: the compute/kernel tests (gpu cases included) and the kernel
# benchmarks, with the device named. Needs CUDA, CuPy (cupy-cuda13x on CUDA 13), numpy, scipy
# and pytest; not pydantic, structlog, gRPC or cuVS (the CAGRA test skips without cuVS).
#
#   OUT=/some/dir bench/gpu/run_all.sh        # results under $OUT, else bench/results/
#
# Writes: device.txt, gpu_tests.txt, bench.log, kernels.jsonl, kernels.md.
# Exit status: non-zero if a test failed or a benchmark case disagreed with the reference.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-bench/results}"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1

if ! "$PY" -c "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0" 2>"$OUT/device.txt"; then
    echo "CuPy or a CUDA device is missing; see $OUT/device.txt" >&2
    exit 2
fi
{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
    "$PY" -c "import cupy; p = cupy.cuda.runtime.getDeviceProperties(0); print('cupy device:', p['name'].decode() if isinstance(p['name'], bytes) else p['name']); cupy.show_config()"
} >>"$OUT/device.txt" 2>&1
head -n 3 "$OUT/device.txt"

# --noconftest: tests/conftest.py serves the whole application (gRPC, pydantic), which these
# modules do not use and this image may not carry. Library warnings are shown, not fatal, here.
"$PY" -m pytest --noconftest -p no:cacheprovider -q -rs \
    -W default::UserWarning -W default::FutureWarning -W default::DeprecationWarning \
    tests/test_compute_*.py tests/test_kernels_*.py 2>&1 | tee "$OUT/gpu_tests.txt"
tests_rc=${PIPESTATUS[0]}

rm -f "$OUT/kernels.jsonl" "$OUT/kernels.md"
"$PY" bench/gpu/bench_kernels.py --backend cupy --sizes 100000,1000000 --out "$OUT" 2>&1 | tee "$OUT/bench.log"
bench_rc=${PIPESTATUS[0]}
# The CPU backend on the same host at 100K: the named peer for the GPU numbers in kernels.md.
"$PY" bench/gpu/bench_kernels.py --backend numpy --sizes 100000 --repeat 3 --max-seconds 10 --out "$OUT" 2>&1 \
    | tee -a "$OUT/bench.log"
peer_rc=${PIPESTATUS[0]}

echo "tests rc=$tests_rc  gpu bench rc=$bench_rc  cpu bench rc=$peer_rc  results in $OUT"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$peer_rc" -eq 0 ]
