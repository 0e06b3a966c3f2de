#!/bin/bash
# SCALE continual pre-training on Korean, the whole pipeline as one job:
#   [convert the HF base] -> [preprocess] -> upscale -> train (srun / torchrun) -> evaluate -> export to HF
#
#   sbatch examples/scale_korean.sh examples/configs/llama3.2-1b.env   # a cluster, a real model
#   ARRAY=1 bash examples/scale_korean.sh examples/configs/llama3.2-1b.env [SBATCH FLAGS]  # methods side by side
#   bash examples/scale_korean.sh                                       # no Slurm: the CPU demo on SmolLM2-135M
#   bash examples/scale_korean.sh examples/configs/tiny-cpu.env         # the tiny from-scratch base (CI)
#
# Settings: a config file (first argument or SCALE_CONFIG; examples/configs/*.env; by default
# examples/configs/smollm2-cpu.env), then the environment (which wins: configs assign with
# ': "${VAR:=value}"'), then the defaults of megatron_scale/recipe/settings.py (the tiny demo). The steps, and what each skips because it is done (so a
# requeued job resumes), are megatron_scale/recipe/steps.py; this script launches what it says.
# #SBATCH lines are defaults: sbatch's own flags override them.
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
SCALE_JOB_START=$(date +%s); export SCALE_JOB_START   # "so far" in each step's header: this run's time
ON_SLURM=0; [ -n "${SLURM_JOB_ID:-}" ] && ON_SLURM=1
if [ -z "${SCALE_REPO:-}" ]; then   # sbatch runs a copy of this file, so $0 is no guide there
  if [ "$ON_SLURM" = 1 ]; then SCALE_REPO=${SLURM_SUBMIT_DIR:-$PWD}
  else SCALE_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd); fi
fi
[ -f "$SCALE_REPO/megatron_scale/train.py" ] || die "SCALE_REPO=$SCALE_REPO is not a megatron-scale checkout (set SCALE_REPO)"
cd "$SCALE_REPO"
SCALE_CONFIG=${1:-${SCALE_CONFIG:-examples/configs/smollm2-cpu.env}}
[ -f "$SCALE_CONFIG" ] || die "config file $SCALE_CONFIG does not exist (first argument or SCALE_CONFIG)"
set -a   # every setting the config assigns reaches the Python recipe through the environment
# shellcheck source=/dev/null
source "$SCALE_CONFIG"
set +a

# ---- the launcher's own settings; the recipe's are in megatron_scale/recipe/settings.py -----------
: "${NPROC:=2}" "${CONTAINER_IMAGE:=}" "${CONTAINER_MOUNTS:=$SCALE_REPO:$SCALE_REPO}"
if [ -z "${PYTHON:-}" ]; then
  if [ -n "$CONTAINER_IMAGE" ]; then PYTHON=python
  elif [ -n "${VENV:-}" ]; then PYTHON=$VENV/bin/python
  else PYTHON=$(bash "$SCALE_REPO/tools/venv.sh"); fi  # the tests' .venv, made here on a fresh clone
fi
RECIPE=python3   # the recipe's logic is standard library only: outside a container, on this host
[ -n "$CONTAINER_IMAGE" ] || RECIPE=$PYTHON
# ARRAY=1: submit a preparation job, one array task per method and a report job, each this script
# with SCALE_PART set (megatron_scale/recipe/array.py); the arguments after the config go to sbatch
if [ "${ARRAY:-0}" = 1 ] && [ -z "${SCALE_PART:-}" ]; then
  exec "$RECIPE" -m megatron_scale.recipe submit "$SCALE_REPO/examples/scale_korean.sh" "$SCALE_CONFIG" "${@:2}"
fi
: "${MASTER_PORT:=$((29500 + ${SLURM_JOB_ID:-0} % 1000))}"
# a requeued run takes the next port: its previous run's ranks may still hold the last one
MASTER_PORT=$((MASTER_PORT + ${SLURM_RESTART_COUNT:-0}))
export SCALE_REPO MASTER_PORT OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONWARNINGS=${PYTHONWARNINGS:-ignore}
export SCALE_LAUNCHER_PID=$$   # who holds a lock in $WORKDIR/locks without Slurm
# tools/*.py import megatron_scale from this checkout, as `python -m megatron_scale.train` (run here) does
export PYTHONPATH=$SCALE_REPO${PYTHONPATH:+:$PYTHONPATH}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN} TORCH_NCCL_ASYNC_ERROR_HANDLING=${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-1}   # NCCL_IB_HCA, NCCL_SOCKET_IFNAME: pass through
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
CONTAINER=()
[ -n "$CONTAINER_IMAGE" ] && CONTAINER=(--container-image="$CONTAINER_IMAGE" --container-mounts="$CONTAINER_MOUNTS" --container-workdir="$SCALE_REPO")

# ---- launching: one task per GPU under srun, torchrun on this machine otherwise --------------
# Stopping early (docs/recipe.md, "Requeue and pre-emption"). USR1 (--signal=B:USR1@300: the time
# limit is near): the running step saves and stops, and the job requeues itself. A training whose
# tasks got SIGTERM themselves (pre-emption's notice with a GraceTime, `scancel --signal=TERM JOB`)
# saves and exits 0: the job requeues itself too. SIGTERM to this shell (scancel, Slurm ending the
# job): save what can be saved and stop, no requeue (Slurm's own pre-emption requeues by itself).
# No further step starts once stopping; the requeued job skips what is done.
STEP_PID='' STEP_SRUN=0 STOPPING=0 REQUEUE=0
signal_step() {  # ask the running step to save and stop
  [ -n "$STEP_PID" ] || return 0
  if [ "$STEP_SRUN" = 1 ]; then
    # srun answers SIGTERM by SIGKILLing its tasks, which then cannot save: have Slurm deliver
    # SIGTERM to the tasks themselves (every step of this job; the batch shell is not a target)
    scancel --signal=TERM "$SLURM_JOB_ID" || kill -TERM "$STEP_PID" 2>/dev/null || true
  else
    kill -TERM "$STEP_PID" 2>/dev/null || true   # torchrun passes it to its workers
  fi
}
on_signal() {
  [ "$1" = USR1 ] && REQUEUE=1
  [ "$STOPPING" = 1 ] && return 0
  STOPPING=1
  echo "scale_korean.sh: SIG$1: asking the running step to save and stop" >&2
  signal_step
}
trap 'on_signal USR1' USR1
trap 'on_signal TERM' TERM
stop_job() {  # $1: why. No step after this one; requeue when REQUEUE=1 under Slurm.
  echo "scale_korean.sh: $1"
  if [ "$ON_SLURM" = 0 ]; then
    echo "scale_korean.sh: stopped; run the same command again to resume"
    exit 0
  fi
  if [ "$REQUEUE" = 0 ]; then
    echo "scale_korean.sh: stopped without requeueing (SIGTERM to the batch script: the job is being cancelled or ended by Slurm); submit it again to resume"
    exit 0
  fi
  local rc=0
  trap '' TERM   # the requeue's own SIGTERM to this shell is expected now: not a stop request
  scontrol requeue "$SLURM_JOB_ID" || rc=$?
  # the requeue ends this run at once: scontrol itself may get the SIGTERM before it returns
  if [ "$rc" = 0 ] || [ "$rc" -gt 128 ]; then
    echo "scale_korean.sh: requeued job $SLURM_JOB_ID; when it starts again it skips the finished steps and resumes"
    exit 0
  fi
  echo "scale_korean.sh: scontrol requeue refused (a job submitted with --no-requeue?); submit it again to resume" >&2
  exit 1
}
launch() {  # COMMAND...: run a step in the background, pass it a signal, return its status
  "$@" & STEP_PID=$!
  [ "$STOPPING" = 1 ] && signal_step   # a signal that came before STEP_PID was set
  local rc=0
  while :; do  # a trapped signal interrupts `wait`, so wait again
    rc=0; wait "$STEP_PID" || rc=$?
    kill -0 "$STEP_PID" 2>/dev/null || break
  done
  STEP_PID='' STEP_SRUN=0
  [ "$STOPPING" = 1 ] && stop_job "stopped on a signal"
  return "$rc"
}
single() {  # a one-process step (it may start its own ranks); inside the container when there is one
  if [ "$ON_SLURM" = 1 ] && [ -n "$CONTAINER_IMAGE" ]; then
    STEP_SRUN=1
    launch srun --nodes=1 --ntasks=1 --kill-on-bad-exit=1 "${CONTAINER[@]}" "$PYTHON" "$@"
  else
    launch "$PYTHON" "$@"
  fi
}
train() {  # python -m megatron_scale.train FLAGS... on every rank
  if [ "$ON_SLURM" = 1 ]; then
    STEP_SRUN=1
    # shellcheck disable=SC2016  # expanded by each task's shell, from that task's Slurm variables
    launch srun --kill-on-bad-exit=1 "${CONTAINER[@]}" bash -c \
      'echo "rank $SLURM_PROCID of $SLURM_NTASKS on node $SLURMD_NODENAME (local rank $SLURM_LOCALID), master $MASTER_ADDR:$MASTER_PORT"
       RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID exec "$@"' rank \
      "$PYTHON" -m megatron_scale.train "$@"
  else
    launch "$PYTHON" -m torch.distributed.run --standalone --nproc-per-node="$NPROC" -m megatron_scale.train "$@"
  fi
}

if [ "$ON_SLURM" = 1 ]; then
  MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
  export MASTER_ADDR
  echo "job $SLURM_JOB_ID: nodes $SLURM_JOB_NODELIST, $SLURM_NTASKS tasks, master $MASTER_ADDR:$MASTER_PORT, restart ${SLURM_RESTART_COUNT:-0}"
else
  echo "no Slurm: running on this machine with torchrun, $NPROC ranks"
fi
summary=$("$RECIPE" -m megatron_scale.recipe summary)   # checks the settings, makes $WORKDIR
echo "repo $SCALE_REPO, python $PYTHON, $summary"
# ---- the steps: ask the recipe for action k, launch it, ask for k+1 ------------------------------
k=0 again=''
# on exit: release this job's locks, record how it ended; TERM ignored (a requeue's comes now)
trap 'rc=$?; trap "" TERM; "$RECIPE" -m megatron_scale.recipe exit "$k" "$rc" || true' EXIT
while :; do
  k=$((k + 1))
  [ "$STOPPING" = 1 ] && stop_job "stopped on a signal between steps"
  plan=$("$RECIPE" -m megatron_scale.recipe next "$k" $again)   # kind, then one argument per line
  mapfile -t cmd <<<"$plan"
  again=''
  case ${cmd[0]} in
    wait) launch sleep "${cmd[1]}"; k=$((k - 1)) again=again ;;   # another job holds its lock
    single) single "${cmd[@]:1}" ;;
    train)
      train "${cmd[@]:1}"
      # exit status 0 but not done: its tasks got SIGTERM (not through this shell), saved and stopped
      state=$("$RECIPE" -m megatron_scale.recipe "done" "$k")
      if [ "$state" != "done" ]; then
        REQUEUE=1   # pre-emption's notice (or a user's TERM) reached the tasks, not this shell
        stop_job "the training stopped before its last iteration (a signal to its tasks, or --exit-interval)"
      fi ;;
    skip) ;;
    end) break ;;
    *) die "unexpected answer from megatron_scale.recipe: $plan" ;;
  esac
done
