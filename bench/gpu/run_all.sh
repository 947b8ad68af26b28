#!/usr/bin/env bash
# GPU check in one command: the compute/kernel tests (gpu cases included), the kernel
# benchmarks, the index conformance suite on the device and the pipeline's latency on the numpy
# and cupy backends, with the device named. Needs CUDA, CuPy (cupy-cuda13x on CUDA 13), numpy,
# scipy and pytest; the conformance suite and the pipeline also need pydantic, pydantic-settings,
# python-dotenv, stop-words and structlog (the wheels of bench/gpu/wheels.txt: install them
# first on a machine that reaches no registry; they are skipped, saying so, when missing). Not gRPC or cuVS (the
# CAGRA test skips without cuVS).
#
#   OUT=/some/dir bench/gpu/run_all.sh        # results under $OUT, else bench/results/
#   PIPELINE_SIZES=10000,100000 ...           # memories for the pipeline latency (default 10000)
#
# Writes: device.txt, gpu_tests.txt, bench.log, kernels.jsonl, kernels.md, conformance.txt,
# pipeline.jsonl, pipeline.md, group_sizes.json.
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

# The application's layers on the device: the GPU-resident backends through the same conformance
# suite as the in-process indexes, then the whole pipeline, numpy against cupy, answers compared.
if "$PY" -c "import pydantic, pydantic_settings, stop_words, structlog" 2>/dev/null; then
    # dense.hnsw is a CPU backend (CI runs it); hnswlib ships no wheel, so a bare image may lack it.
    only=(); "$PY" -c "import hnswlib" 2>/dev/null || only=(-k "not hnsw")
    # (and the pipeline on the device: each space served by its resident backend, the device
    # ranking as the host does, waiting retrievals grouped into one batched scan)
    "$PY" -m pytest --noconftest -p no:cacheprovider -q -rs "${only[@]}" tests/test_index_conformance.py \
        tests/test_named_backends.py tests/test_backend_agreement.py tests/test_retrieval_groups.py 2>&1 \
        | tee "$OUT/conformance.txt"
    conf_rc=${PIPESTATUS[0]}
    # the same float32 dense rows on both sides (by default the host keeps int8 rows), so the
    # answers can be compared: on cupy every space's rows are resident (BM25 weighed exactly, as
    # bm25.numpy does on the host), and the run fails when fewer than 99% of its top-10 sets agree
    # with numpy:bm25.numpy; numpy with its built-in BM25 field is timed beside
    "$PY" bench/gpu/pipeline_latency.py --sizes "${PIPELINE_SIZES:-10000}" \
        --backends numpy:bm25.numpy,cupy,numpy \
        --settings '{"spaces": {"E1_semantic": {"values": "float32"}}}' \
        --out "$OUT" 2>&1 | grep -v '\[info' | tee -a "$OUT/bench.log"
    pipe_rc=${PIPESTATUS[0]}
    # concurrent callers through the server's queue: the groups they form and queries a second
    "$PY" bench/gpu/group_sizes.py --backend cupy --size "${GROUP_SIZE:-10000}" --callers 1,16 --out "$OUT" 2>&1 \
        | grep -v '\[info' | tee -a "$OUT/bench.log"
    group_rc=${PIPESTATUS[0]}
    [ "$group_rc" -eq 0 ] || pipe_rc=$group_rc
else
    echo "pydantic, pydantic-settings, stop-words or structlog is missing: conformance suite and pipeline latency skipped" \
        | tee "$OUT/conformance.txt"
    conf_rc=0 pipe_rc=0
fi

# The CPU backend on the same host at 100K: the named peer for the GPU numbers in kernels.md.
"$PY" bench/gpu/bench_kernels.py --backend numpy --sizes 100000 --repeat 3 --max-seconds 10 --out "$OUT" 2>&1 \
    | tee -a "$OUT/bench.log"
peer_rc=${PIPESTATUS[0]}

echo "tests rc=$tests_rc  gpu bench rc=$bench_rc  cpu bench rc=$peer_rc  conformance rc=$conf_rc  pipeline rc=$pipe_rc  results in $OUT"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$peer_rc" -eq 0 ] && [ "$conf_rc" -eq 0 ] && [ "$pipe_rc" -eq 0 ]
