#!/usr/bin/env bash
# One run on a lent Hopper GPU (H100, H200): everything calibration measures there, in $OUT.
#
#   bash calibrate/scripts/device_h100.sh                 # on the GPU machine, every piece
#   bash calibrate/scripts/device_h100.sh cuda env duty   # only the pieces named
#   bash calibrate/scripts/device_h100.sh cpu             # the dry run on a CPU (tests/test_device_script.py)
#
# Needs only what the GPU image has: python3 with torch, torchvision, numpy, scipy, pyyaml,
# networkx (no pydantic, no simpy: nothing here imports them). Nothing is downloaded or
# installed. It never changes the card's settings (nvidia-smi is only queried). Each piece
# has its own time limit and a failed piece does not stop the others; the log says which
# failed. Pieces (GPU seconds at most), and the files they write:
#   env (20)        env.json: versions, GPU, driver, nvidia-smi -q (read-only)
#   compute (180)   compute.json: calibrate compute: GEMMs (bf16, fp8; training shapes incl.
#                   GPT-3 175B and Llama-2-70B under TP 8, and their weight gradients), SDPA
#                   forward and backward by backend (FLASH, EFFICIENT, CUDNN; head dim 64/128;
#                   seq 2k/4k/8k; causal and not), elementwise and norm bandwidth, launches,
#                   dispatch, AdamW
#   clocks (95)     clocks.csv: a 75 s bf16 8192^3 GEMM stream: TFLOP/s per window and
#                   nvidia-smi clocks, power, temperature, throttle reasons
#   cnn (110)       cnn.json: ResNet-50 (batch 256), VGG-16 (128), Inception V3 (128, 299 px):
#                   bf16 autocast, channels_last, SGD; images/s
#   duty (60)       duty.json: one 8192^3 GEMM at GEMM duty cycles 1 to 0.15 (calibrate.duty_cycle
#                   sweep): its rate, SM clock and power at each
#   duty-idle (60)  duty-idle.json: the same with the GPU idling (a spin kernel) between GEMMs
#   duty-fp8 (60), duty-idle-fp8 (60)  duty-fp8.json, duty-idle-fp8.json: both with an fp8 GEMM
#                   (torch._scaled_mm; skipped on a CPU, where torch only emulates fp8)
#   step-power (150)  power-1b.json, power-8b.json: the 1b and 8b steps (below) run 60 steps
#                   each under nvidia-smi (calibrate.duty_cycle power): the draw and SM clock
#                   of a step, to check the power model fitted to the duty pieces
#   titan (150)     titan-flash.json, titan-flash_trace.json: calibrate.titan_step, a
#                   torchtitan-shaped Llama 3 8B step (16 of its layers, batch 2 x 8192,
#                   FSDP2 bf16 parameters on one rank, per-op SAC, SDPA pinned to flash),
#                   10 timed steps, a trace of 2, under nvidia-smi (power-titan.json)
#   titan-cudnn (90), titan-8 (90), titan-full (90)  titan-cudnn.json, titan-flash-8.json,
#                   titan-full.json: the same with SDPA's cuDNN backend, with 8 layers
#                   (the per-layer time by difference), with full recomputation
#   step (75)       step.json, step_trace.json: calibrate step: a 12-layer GPT (hidden 2048, seq
#                   2048, batch 8, bf16) and its PyTorch profiler (Kineto) trace, 3 steps;
#                   replay.json: the trace's GEMMs re-run alone (calibrate.duty_cycle replay)
#   step-8b (150)   step-8b.json, step-8b_trace.json, replay-8b.json: the same at Llama-3-8B's
#                   layer (hidden 4096, ffn 14336, 4 layers, seq 4096, batch 2)
#   step-70b (180)  step-70b.json, step-70b_trace.json, replay-70b.json: at Llama-3-70B's
#                   layer without TP (hidden 8192, ffn 28672, 2 layers, seq 4096, batch 2)
#   step-175b (180) step-175b.json, ..._trace.json, replay-175b.json: at GPT-3 175B's layer
#                   without TP (hidden 12288, ffn 49152, 1 layer, seq 2048, batch 4)
#   step-1b (150)   step-1b.json, ..._trace.json, replay-1b.json: a small GPT (hidden 1024,
#                   8 layers, seq 2048, batch 8): a low GEMM duty cycle
# At the end every file but log.txt goes into measurements.tar.gz (the device tool brings
# back at most 8 files). Afterwards, here: clustersim calibrate fit compute.json
#   step_trace.json step.json --topology single-h100 --out calibrate/profiles/h100-sxm-ops.yaml;
#   clustersim calibrate compare step.json --trace step_trace.json --profile ... --topology
#   single-h100
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

PIECES=("${@:2}")
[ "${#PIECES[@]}" -gt 0 ] || PIECES=(env compute clocks cnn duty duty-idle duty-fp8 duty-idle-fp8 step step-8b step-70b step-175b step-1b step-power titan titan-cudnn titan-8 titan-full)
B8="layers=4,hidden=4096,heads=32,ffn_hidden=14336,vocab=32768,seq=4096,batch=2"
B70="layers=2,hidden=8192,heads=64,ffn_hidden=28672,vocab=32768,seq=4096,batch=2"
B175="layers=1,hidden=12288,heads=96,ffn_hidden=49152,vocab=32768,seq=2048,batch=4"
B1="layers=8,hidden=1024,heads=16,ffn_hidden=4096,vocab=32768,seq=2048,batch=8"
if [ "$DEV" = cpu ]; then  # the dry run: small cases, and room for a shared 2-core host
    declare -A LIMIT=([env]=120 [compute]=900 [clocks]=300 [cnn]=600 [duty]=300 [step]=600
                      [replay]=300 [titan]=300)
    COMPUTE=(--device cpu --quick)
    CLOCKS=(--device cpu --seconds 2 --n 256 --window 2)
    CNN=(--device cpu --batch 1 --steps 1 --warmup 0)
    DUTY=(--device cpu --seconds 0.3 --n 128 --pause 0 --duties 1,0.5)
    STEP=(--device cpu --quick --steps 2 --trace-steps 2)
    REPLAY=(--device cpu --iters 16 --pause 0)
    POWER_STEPS=2
    TITAN=(--device cpu --quick --steps 2 --warmup 1 --attention math)
    B8="layers=1,hidden=64,heads=2,ffn_hidden=224,vocab=512,seq=64,batch=2"
    B70="layers=1,hidden=128,heads=2,ffn_hidden=448,vocab=512,seq=64,batch=2"
    B175="layers=1,hidden=96,heads=2,ffn_hidden=384,vocab=512,seq=32,batch=2"
    B1="layers=2,hidden=32,heads=2,ffn_hidden=128,vocab=512,seq=64,batch=2"
else
    declare -A LIMIT=([env]=20 [compute]=180 [clocks]=95 [cnn]=110 [duty]=60 [step]=75
                      [replay]=75 [titan]=150)
    COMPUTE=(--device cuda)
    CLOCKS=(--device cuda --seconds 75)
    CNN=(--device cuda)
    DUTY=(--device cuda)
    STEP=(--device cuda --steps 20 --trace-steps 3)
    REPLAY=(--device cuda)
    POWER_STEPS=60
    TITAN=(--device cuda --steps 10 --warmup 3)
fi

stepjob() {  # stepjob NAME [CONFIG]: a traced step job and its GEMMs replayed alone
    local name="$1" suffix="${1#step}"
    shift
    piece "$name" "${LIMIT[step]}" "$PY" -m calibrate calibrate step "${STEP[@]}" "$@" \
        --out "$OUT/$name.json" --trace "$OUT/${name}_trace.json"
    piece "replay$suffix" "${LIMIT[replay]}" "$PY" -m calibrate.duty_cycle replay \
        "$OUT/${name}_trace.json" "${REPLAY[@]}" --out "$OUT/replay$suffix.json"
}

for p in "${PIECES[@]}"; do
    case "$p" in
        env) piece env "${LIMIT[env]}" "$PY" -m calibrate.device_env --out "$OUT/env.json" ;;
        compute) piece compute "${LIMIT[compute]}" "$PY" -m calibrate calibrate compute \
            "${COMPUTE[@]}" --out "$OUT/compute.json" ;;
        clocks) piece clocks "${LIMIT[clocks]}" "$PY" -m calibrate.clocks "${CLOCKS[@]}" \
            --out "$OUT/clocks.csv" ;;
        cnn) piece cnn "${LIMIT[cnn]}" "$PY" -m calibrate.cnn "${CNN[@]}" --out "$OUT/cnn.json" ;;
        duty) piece duty "${LIMIT[duty]}" "$PY" -m calibrate.duty_cycle sweep "${DUTY[@]}" \
            --out "$OUT/duty.json" ;;
        step) stepjob step ;;
        step-8b) stepjob step-8b --config "$B8" ;;
        step-70b) stepjob step-70b --config "$B70" ;;
        step-175b) stepjob step-175b --config "$B175" ;;
        step-power)
            for size in 1b 8b; do
                cfg="$B1"
                [ "$size" = 8b ] && cfg="$B8"
                piece "power-$size" "${LIMIT[step]}" "$PY" -m calibrate.duty_cycle power \
                    --out "$OUT/power-$size.json" -- "$PY" -m calibrate calibrate step \
                    "${STEP[@]}" --steps "$POWER_STEPS" --config "$cfg" \
                    --out "$OUT/step-power-$size.json"
            done ;;
        step-1b) stepjob step-1b --config "$B1" ;;
        titan) piece titan "${LIMIT[titan]}" "$PY" -m calibrate.duty_cycle power \
            --out "$OUT/power-titan.json" -- "$PY" -m calibrate.titan_step "${TITAN[@]}" \
            --out "$OUT/titan-flash.json" --trace "$OUT/titan-flash_trace.json" ;;
        titan-cudnn | titan-8 | titan-full)
            if [ "$p" = titan-cudnn ] && [ "$DEV" = cpu ]; then
                echo "== $p: skipped on cpu (no cuDNN attention there)" | tee -a "$LOG"
                continue
            fi
            extra=(--attention cudnn)
            name=titan-cudnn
            [ "$p" = titan-8 ] && extra=(--layers 8) && name=titan-flash-8
            [ "$p" = titan-full ] && extra=(--ac full) && name=titan-full
            piece "$p" $((LIMIT[titan] * 3 / 5)) "$PY" -m calibrate.titan_step "${TITAN[@]}" \
                "${extra[@]}" --out "$OUT/$name.json" ;;
        duty-idle) piece duty-idle "${LIMIT[duty]}" "$PY" -m calibrate.duty_cycle sweep \
            "${DUTY[@]}" --other idle --out "$OUT/duty-idle.json" ;;
        duty-fp8 | duty-idle-fp8)
            if [ "$DEV" = cpu ]; then
                echo "== $p: skipped on cpu (fp8 is emulated there)" | tee -a "$LOG"
            else
                other=memory
                [ "$p" = duty-fp8 ] || other=idle
                piece "$p" "${LIMIT[duty]}" "$PY" -m calibrate.duty_cycle sweep "${DUTY[@]}" \
                    --other "$other" --dtype fp8 --out "$OUT/$p.json"
            fi ;;
        *) echo "== unknown piece '$p'; allowed: env compute clocks cnn duty duty-idle duty-fp8 duty-idle-fp8 step step-8b step-70b step-175b step-1b step-power titan titan-cudnn titan-8 titan-full" \
               | tee -a "$LOG"; failed=$((failed + 1)) ;;
    esac
done
(cd "$OUT" && find . -maxdepth 1 -type f ! -name log.txt ! -name measurements.tar.gz -printf '%P\n' \
    | sort | tar -czf measurements.tar.gz -T - && find . -maxdepth 1 -type f ! -name log.txt \
    ! -name measurements.tar.gz -delete)
tar -tzvf "$OUT/measurements.tar.gz" | tee -a "$LOG"
echo "device script: $failed piece(s) failed" | tee -a "$LOG"
exit "$failed"
