#!/usr/bin/env bash
# One run on a lent GPU (H100): everything calibration measures there, written to $OUT.
#
#   bash calibrate/scripts/device_h100.sh          # on the GPU machine (about 5 minutes)
#   bash calibrate/scripts/device_h100.sh cpu      # the dry run on a CPU (tests/test_device_script.py)
#
# Needs only what the GPU image has: python3 with torch, torchvision, numpy, scipy, pyyaml,
# networkx (no pydantic, no simpy: nothing here imports them). Nothing is downloaded or
# installed. It never changes the card's settings (nvidia-smi is only queried). Each piece
# has its own time limit and a failed piece does not stop the others; the log says which
# failed. Files under $OUT (7, each well under 16 MiB):
#   env.json         versions, GPU, driver, nvidia-smi -q (read-only)
#   compute.json     calibrate compute: GEMMs (bf16, fp8; training shapes incl. GPT-3 175B
#                    and Llama-2-70B under TP 8, and their weight gradients), SDPA forward and
#                    backward by backend (FLASH, EFFICIENT, CUDNN; head dim 64/128; seq
#                    2k/4k/8k; causal and not), elementwise and norm bandwidth, launches,
#                    dispatch, AdamW
#   clocks.csv       a 75 s bf16 8192^3 GEMM stream: TFLOP/s per window and nvidia-smi clocks,
#                    power, temperature, throttle reasons (sustained clocks under power)
#   cnn.json         ResNet-50 (batch 256), VGG-16 (128), Inception V3 (128, 299 px): bf16
#                    autocast, channels_last, SGD; images/s
#   step.json        calibrate step: a 12-layer GPT (hidden 2048, seq 2048, batch 8, bf16)
#   step_trace.json  its PyTorch profiler (Kineto) trace, 3 steps
#   log.txt          everything printed
# Afterwards, here: clustersim calibrate fit OUT/compute.json OUT/step_trace.json OUT/step.json
#   --topology single-h100 --out calibrate/profiles/h100-sxm-ops.yaml; clustersim calibrate
#   compare OUT/step.json --trace OUT/step_trace.json --profile ... --topology single-h100
set -uo pipefail
DEV="${1:-cuda}"
OUT="${OUT:-${TMPDIR:-/tmp}/clustersim-device}"
mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 KINETO_LOG_LEVEL=5
PY="${PYTHON:-python3}"
LOG="$OUT/log.txt"
: > "$LOG"
failed=0

piece() {  # piece NAME SECONDS CMD...: run one piece under a time limit, log it
    local name="$1" limit="$2"
    shift 2
    local t0=$SECONDS
    echo "== $name ($*)" | tee -a "$LOG"
    timeout "$limit" "$@" >>"$LOG" 2>&1
    local rc=$?
    echo "== $name: exit $rc after $((SECONDS - t0)) s" | tee -a "$LOG"
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
}

if [ "$DEV" = cpu ]; then  # the dry run: small cases, and room for a shared 2-core host
    LIMIT=(120 900 300 600 600)
    COMPUTE=(--device cpu --quick)
    CLOCKS=(--device cpu --seconds 2 --n 256 --window 2)
    CNN=(--device cpu --batch 1 --steps 1 --warmup 0)
    STEP=(--device cpu --quick --steps 2 --trace-steps 2)
else
    LIMIT=(20 180 95 110 75)  # seconds per piece: 8 minutes at most in all
    COMPUTE=(--device cuda)
    CLOCKS=(--device cuda --seconds 75)
    CNN=(--device cuda)
    STEP=(--device cuda --steps 20 --trace-steps 3)
fi

piece env "${LIMIT[0]}" "$PY" -m calibrate.device_env --out "$OUT/env.json"
piece compute "${LIMIT[1]}" "$PY" -m sim calibrate compute "${COMPUTE[@]}" --out "$OUT/compute.json"
piece clocks "${LIMIT[2]}" "$PY" -m calibrate.clocks "${CLOCKS[@]}" --out "$OUT/clocks.csv"
piece cnn "${LIMIT[3]}" "$PY" -m calibrate.cnn "${CNN[@]}" --out "$OUT/cnn.json"
piece step "${LIMIT[4]}" "$PY" -m sim calibrate step "${STEP[@]}" --out "$OUT/step.json" \
    --trace "$OUT/step_trace.json"
ls -la "$OUT" | tee -a "$LOG"
echo "device script: $failed piece(s) failed" | tee -a "$LOG"
exit "$failed"
