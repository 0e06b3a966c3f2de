#!/bin/bash
# SCALE continual pre-training on Korean, the whole pipeline as one job:
#   [convert the HF base] -> [preprocess] -> upscale -> train (srun / torchrun) -> evaluate -> export to HF
#
#   sbatch examples/scale_korean.sh examples/configs/llama3.2-1b.env   # a cluster, a real model
#   bash examples/scale_korean.sh                                       # no Slurm: the tiny CPU demo
#
# Settings: a config file (first argument or SCALE_CONFIG; see examples/configs/*.env), then the
# environment (which wins: configs assign with ': "${VAR:=value}"'), then the tiny defaults below.
# Every step skips what is already done, so a requeued (pre-empted) job resumes from the last
# checkpoint of the run it was in. #SBATCH lines are defaults: sbatch's own flags override them.
#
#SBATCH --job-name=scale-korean
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=16
#SBATCH --time=48:00:00
#SBATCH --output=scale-korean-%j.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=B:USR1@300
set -euo pipefail

die() { echo "scale_korean.sh: error: $*" >&2; exit 2; }
STEP=0
step() { STEP=$((STEP + 1)); echo; echo "==> [$(date +%H:%M:%S)] step $STEP: $*"; }

ON_SLURM=0; [ -n "${SLURM_JOB_ID:-}" ] && ON_SLURM=1
if [ -z "${SCALE_REPO:-}" ]; then   # sbatch runs a copy of this file, so $0 is no guide there
  if [ "$ON_SLURM" = 1 ]; then SCALE_REPO=${SLURM_SUBMIT_DIR:-$PWD}
  else SCALE_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd); fi
fi
[ -f "$SCALE_REPO/megatron_scale/train.py" ] || die "SCALE_REPO=$SCALE_REPO is not a megatron-scale checkout (set SCALE_REPO)"
cd "$SCALE_REPO"

SCALE_CONFIG=${1:-${SCALE_CONFIG:-}}
if [ -n "$SCALE_CONFIG" ]; then
  [ -f "$SCALE_CONFIG" ] || die "config file $SCALE_CONFIG does not exist (first argument or SCALE_CONFIG)"
  # shellcheck source=/dev/null
  source "$SCALE_CONFIG"
fi

# ---- settings (tiny CPU demo unless a config or the environment says otherwise) -------------
: "${HF_MODEL:=}"                    # HF Llama folder; empty: pre-train a tiny base on English
: "${WORKDIR:=$SCALE_REPO/runs/scale_korean}"
: "${DATA_DIR:=$WORKDIR/data}"
: "${METHODS:=scale-preserve scale-adapt scale-route full}"
: "${TP:=2}" "${PP:=1}" "${NPROC:=2}" "${DEVICE:=cpu}"
: "${MICRO_BATCH:=8}" "${GLOBAL_BATCH:=16}" "${SEQ_LENGTH:=128}"
: "${LR:=3e-3}" "${MIN_LR:=3e-4}" "${WARMUP_ITERS:=10}" "${TRAIN_ITERS:=100}"
: "${BASE_ITERS:=300}" "${BASE_LR:=3e-3}"     # tiny base pre-training only
: "${EVAL_ITERS:=4}" "${EVAL_INTERVAL:=$TRAIN_ITERS}" "${SAVE_INTERVAL:=50}" "${LOG_INTERVAL:=10}"
: "${MODEL_FLAGS:=--num-layers 4 --hidden-size 128 --num-attention-heads 8 --num-query-groups 8 --ffn-hidden-size 384}"
: "${SCALE_FLAGS:=--scale-router-tau 0.9}"   # --scale-* flags of upscaling (training reads them from the checkpoint)
: "${TRAIN_FLAGS:=}"                 # any other training flags, e.g. --bf16 --use-distributed-optimizer
: "${KO_TRAIN_INPUT:=}" "${KO_EVAL_INPUT:=}" "${EN_EVAL_INPUT:=}"   # raw corpora (real models)
: "${PREPROCESS_FLAGS:=--append-eod --workers 8}"
: "${EXPORT:=1}" "${VERIFY_EXPORT:=1}" "${LM_EVAL_TASKS:=}" "${LM_EVAL_FLAGS:=}"
: "${CONTAINER_IMAGE:=}" "${CONTAINER_MOUNTS:=$SCALE_REPO:$SCALE_REPO}"
: "${MASTER_PORT:=$((29500 + ${SLURM_JOB_ID:-0} % 1000))}"
for pair in "TRAIN_ITERS=$TRAIN_ITERS" "BASE_ITERS=$BASE_ITERS"; do   # the LR schedule needs warm-up < iterations
  [ "${pair#*=}" -gt "$WARMUP_ITERS" ] || die "$pair must exceed WARMUP_ITERS=$WARMUP_ITERS"
done
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONWARNINGS=${PYTHONWARNINGS:-ignore} MASTER_PORT
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} TORCH_NCCL_ASYNC_ERROR_HANDLING=${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}   # NCCL_IB_HCA, NCCL_SOCKET_IFNAME: pass through
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ -z "${PYTHON:-}" ]; then
  if [ -n "$CONTAINER_IMAGE" ]; then PYTHON=python
  elif [ -n "${VENV:-}" ]; then PYTHON=$VENV/bin/python
  else PYTHON=$(bash "$SCALE_REPO/tools/venv.sh"); fi  # the tests' .venv, made here on a fresh clone
fi
read -r -a MODEL_ARGS <<<"$MODEL_FLAGS"
read -r -a SCALE_ARGS <<<"$SCALE_FLAGS"
read -r -a EXTRA_ARGS <<<"$TRAIN_FLAGS"
CONTAINER=()
[ -n "$CONTAINER_IMAGE" ] && CONTAINER=(--container-image="$CONTAINER_IMAGE" --container-mounts="$CONTAINER_MOUNTS" --container-workdir="$SCALE_REPO")
mkdir -p "$WORKDIR"/{ckpt,runs,hf,report}

# ---- launching: one task per GPU under srun, torchrun on this machine otherwise --------------
STEP_PID='' STOPPING=0 REQUEUE=0
on_signal() {  # USR1: the time limit is near (requeue); TERM: pre-emption (Slurm requeues)
  STOPPING=1; [ "$1" = USR1 ] && REQUEUE=1
  echo "scale_korean.sh: SIG$1: asking the running step to save and stop" >&2
  [ -n "$STEP_PID" ] && kill -TERM "$STEP_PID" 2>/dev/null || true
}
trap 'on_signal USR1' USR1
trap 'on_signal TERM' TERM
wait_step() {  # the backgrounded step's status; a trapped signal interrupts `wait`, so wait again
  local rc=0
  while :; do
    rc=0; wait "$STEP_PID" || rc=$?
    kill -0 "$STEP_PID" 2>/dev/null || break
  done
  STEP_PID=''
  if [ "$STOPPING" = 1 ]; then
    if [ "$REQUEUE" = 1 ] && [ "$ON_SLURM" = 1 ]; then scontrol requeue "$SLURM_JOB_ID"; fi
    echo "scale_korean.sh: stopped on a signal after saving; run again (or let Slurm requeue) to resume"
    exit 0
  fi
  return "$rc"
}
single() {  # a one-process step (it may start its own ranks); inside the container when there is one
  if [ "$ON_SLURM" = 1 ] && [ -n "$CONTAINER_IMAGE" ]; then
    srun --nodes=1 --ntasks=1 --kill-on-bad-exit=1 "${CONTAINER[@]}" "$PYTHON" "$@" & STEP_PID=$!
  else
    "$PYTHON" "$@" & STEP_PID=$!
  fi
  wait_step
}
train() {  # python -m megatron_scale.train FLAGS... on every rank
  if [ "$ON_SLURM" = 1 ]; then
    # shellcheck disable=SC2016  # expanded by each task's shell, from that task's Slurm variables
    srun --kill-on-bad-exit=1 "${CONTAINER[@]}" bash -c \
      'echo "rank $SLURM_PROCID of $SLURM_NTASKS on node $SLURMD_NODENAME (local rank $SLURM_LOCALID), master $MASTER_ADDR:$MASTER_PORT"
       RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID exec "$@"' rank \
      "$PYTHON" -m megatron_scale.train "$@" & STEP_PID=$!
  else
    "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node="$NPROC" -m megatron_scale.train "$@" & STEP_PID=$!
  fi
  wait_step
}
done_iters() { cat "$1/latest_checkpointed_iteration.txt" 2>/dev/null || echo 0; }
last_ckpt() { printf '%s/iter_%07d' "$1" "$(done_iters "$1")"; }

if [ "$ON_SLURM" = 1 ]; then
  MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
  export MASTER_ADDR
  echo "job $SLURM_JOB_ID: nodes $SLURM_JOB_NODELIST, $SLURM_NTASKS tasks, master $MASTER_ADDR:$MASTER_PORT"
else
  echo "no Slurm: running on this machine with torchrun, $NPROC ranks"
fi
echo "repo $SCALE_REPO, work dir $WORKDIR, python $PYTHON, methods: $METHODS"

# ---- data ------------------------------------------------------------------------------------
step "data"
if [ -z "$HF_MODEL" ]; then
  TOKENIZER=$DATA_DIR/tokenizer
  EN_TRAIN=$DATA_DIR/en_train_text_document KO_TRAIN=$DATA_DIR/ko_train_text_document
  EN_EVAL=$DATA_DIR/en_valid_text_document KO_EVAL=$DATA_DIR/ko_valid_text_document
  if [ -f "$KO_EVAL.idx" ]; then echo "demo corpora ready in $DATA_DIR"
  else single tools/prepare_demo_data.py --output-dir "$DATA_DIR"; fi
else
  TOKENIZER=$HF_MODEL
  KO_TRAIN=${KO_TRAIN_PREFIX:-$DATA_DIR/ko_train_text_document}
  KO_EVAL=${KO_EVAL_PREFIX:-$DATA_DIR/ko_eval_text_document}
  EN_EVAL=${EN_EVAL_PREFIX:-$DATA_DIR/en_eval_text_document}
  for pair in "$KO_TRAIN=$KO_TRAIN_INPUT" "$KO_EVAL=$KO_EVAL_INPUT" "$EN_EVAL=$EN_EVAL_INPUT"; do
    prefix=${pair%%=*} input=${pair#*=}
    if [ -f "$prefix.idx" ]; then echo "dataset $prefix ready"; continue; fi
    [ -n "$input" ] || die "dataset $prefix is missing and no raw input is set (KO_TRAIN_INPUT / KO_EVAL_INPUT / EN_EVAL_INPUT)"
    read -r -a pre_args <<<"$PREPROCESS_FLAGS"
    single tools/preprocess_data.py --input "$input" --output-prefix "${prefix%_text_document}" \
      --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TOKENIZER" "${pre_args[@]}"
  done
fi
# run flags only: every --load checkpoint records its model (and SCALE geometry), which training takes
COMMON=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TOKENIZER"
  --seq-length "$SEQ_LENGTH" --micro-batch-size "$MICRO_BATCH" --global-batch-size "$GLOBAL_BATCH"
  --tensor-model-parallel-size "$TP" --pipeline-model-parallel-size "$PP" --device "$DEVICE"
  --eval-data-path "en=$EN_EVAL" "ko=$KO_EVAL" --eval-iters "$EVAL_ITERS" --log-interval "$LOG_INTERVAL"
  --exit-signal-save "${EXTRA_ARGS[@]}")

# ---- the base model ----------------------------------------------------------------------------
if [ -z "$HF_MODEL" ]; then
  step "pre-train a tiny base on English ($BASE_ITERS iterations, --method full from scratch)"
  RUN=$WORKDIR/runs/base
  if [ "$(done_iters "$RUN")" -ge "$BASE_ITERS" ]; then echo "base trained: $(last_ckpt "$RUN")"
  else
    RESUME=(); [ -f "$RUN/latest_checkpointed_iteration.txt" ] && RESUME=(--load "$RUN")
    train "${MODEL_ARGS[@]}" "${COMMON[@]}" --method full --data-path "$EN_TRAIN" \
      --train-iters "$BASE_ITERS" --lr "$BASE_LR" --min-lr "$MIN_LR" --lr-decay-style cosine \
      --lr-warmup-iters "$WARMUP_ITERS" --eval-interval "$BASE_ITERS" --save "$RUN" --save-interval "$SAVE_INTERVAL" "${RESUME[@]}"
  fi
  BASE=$(last_ckpt "$RUN") BASE_REPORT=(--base "$RUN/metrics.jsonl")
else
  step "convert $HF_MODEL to a Megatron checkpoint (TP=$TP, PP=$PP)"
  BASE=$WORKDIR/ckpt/base
  if [ -d "$BASE" ]; then echo "converted: $BASE"
  else single tools/convert_hf_to_megatron.py --load "$HF_MODEL" --save "$BASE" \
    --tensor-model-parallel-size "$TP" --pipeline-model-parallel-size "$PP" --no-progress; fi
  # the base's perplexities: every run evaluates at iteration 0, before its first step
  read -r first_method _ <<<"$METHODS"
  BASE_REPORT=(--base "$WORKDIR/runs/$first_method/metrics.jsonl" --base-iteration 0)
fi

# ---- upscale and train, per method ---------------------------------------------------------------
REPORT_RUNS=()
for method in $METHODS; do
  RUN=$WORKDIR/runs/$method
  lr_var=LR_$(echo "$method" | tr 'a-z-' 'A-Z_')   # e.g. LR_FULL=1e-5 overrides LR for one method
  INIT=$BASE
  if [[ $method == scale-* ]]; then
    step "upscale the base for $method"
    INIT=$WORKDIR/ckpt/$method
    if [ -d "$INIT" ]; then echo "upscaled: $INIT"
    else single tools/upscale_checkpoint.py --load "$BASE" --save "$INIT" \
      --scale-variant "${method#scale-}" "${SCALE_ARGS[@]}" --tensor-model-parallel-size "$TP" --pipeline-model-parallel-size "$PP"; fi
  fi
  step "continue on Korean with --method $method ($TRAIN_ITERS iterations)"
  if [ "$(done_iters "$RUN")" -ge "$TRAIN_ITERS" ]; then echo "trained: $(last_ckpt "$RUN")"
  else
    LOAD=$INIT; [ -f "$RUN/latest_checkpointed_iteration.txt" ] && LOAD=$RUN   # requeued: resume
    train "${COMMON[@]}" --method "$method" --load "$LOAD" --data-path "$KO_TRAIN" \
      --train-iters "$TRAIN_ITERS" --lr "${!lr_var:-$LR}" --min-lr "$MIN_LR" --lr-decay-style cosine \
      --lr-warmup-iters "$WARMUP_ITERS" --eval-interval "$EVAL_INTERVAL" --save "$RUN" --save-interval "$SAVE_INTERVAL"
  fi
  REPORT_RUNS+=(--run "$method=$RUN/metrics.jsonl")
done

step "evaluate: English (forgetting) and Korean (learning) perplexity"
single tools/scale_report.py "${BASE_REPORT[@]}" "${REPORT_RUNS[@]}" --output "$WORKDIR/report"

if [ "$EXPORT" = 1 ]; then
  for method in $METHODS; do
    step "export $method to Hugging Face"
    OUT=$WORKDIR/hf/$method VERIFY=(); [ "$VERIFY_EXPORT" = 1 ] && VERIFY=(--verify)
    if [ -d "$OUT" ]; then echo "exported: $OUT"
    else single tools/convert_megatron_to_hf.py --load "$(last_ckpt "$WORKDIR/runs/$method")" --save "$OUT" \
      --tokenizer "$TOKENIZER" --no-progress "${VERIFY[@]}"; fi  # runs record their model arguments
    if [ -n "$LM_EVAL_TASKS" ]; then
      read -r -a lm_args <<<"$LM_EVAL_FLAGS"
      single tools/lm_eval_hf.py --model "$OUT" --tasks "$LM_EVAL_TASKS" --output "$WORKDIR/report/lm_eval_$method.json" "${lm_args[@]}"
    fi
  done
fi
echo; echo "done: table $WORKDIR/report/report.md, plot $WORKDIR/report/perplexity.png, models $WORKDIR/hf/"
