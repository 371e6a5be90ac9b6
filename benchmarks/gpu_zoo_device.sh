#!/usr/bin/env bash
# The GPU half of the zoo on a lent GPU machine, in one call (see benchmarks/zoo/manifest-gpu.json):
# score every GPU program under `torchneck run` (runs kept), measure each plant (planted vs fixed),
# time aligned vs unaligned half-precision GEMMs. Needs the wheels of torchneck's dependencies the
# machine lacks in .whl/ (msgspec, isal, greenlet); writes everything under $OUT.
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
OUT=${OUT:-/tmp/gpu-zoo-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
nvidia-smi -L 2>&1 | tee "$OUT/device.txt"
python3 -c "import torch, msgspec, isal, greenlet, rich; print('torch', torch.__version__, torch.cuda.is_available())" 2>&1 | tee -a "$OUT/device.txt"
GPU_PROGRAMS=${GPU_PROGRAMS:-"g_launch_server g_metrics_item g_loader_trainer g_fp32_hf_loop g_bow_half g_slow_rank"}
VERIFY_PROGRAMS=${VERIFY_PROGRAMS:-$GPU_PROGRAMS}  # measured (planted vs fixed): the new ones, when time is short
KEEP=/tmp/gpu-zoo-runs
rm -rf "$KEEP"
echo "== score (torchneck run of each program)"
timeout "${SCORE_TIMEOUT:-270}" python3 benchmarks/zoo_score.py --only $GPU_PROGRAMS --keep "$KEEP" 2>&1 | tee "$OUT/score.txt"
find "$KEEP" -name "report.*" -delete  # the kept runs are re-diagnosed; their samples are kept (callers of helpers)
tar czf "$OUT/runs.tgz" -C "$KEEP" . && ls -la "$OUT/runs.tgz"
echo "== measure (planted vs fixed)"
timeout "${VERIFY_TIMEOUT:-200}" python3 benchmarks/zoo_verify.py --only $VERIFY_PROGRAMS --repeat "${REPEAT:-2}" --write 2>&1 | tee "$OUT/verify.txt"
cp benchmarks/zoo/manifest-gpu.json benchmarks/zoo/manifest-zook.json "$OUT/"
if [ "${GEMM:-1}" = 1 ]; then
  echo "== GEMM alignment"
  timeout 45 python3 benchmarks/gemm_alignment.py --json "$OUT/gemm_alignment.json" 2>&1 | tee "$OUT/gemm.txt"
fi
echo "== summary"
grep -v "^$" "$OUT/score.txt" | tail -12
cat "$OUT/verify.txt"
