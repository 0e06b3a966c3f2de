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
# ': "${VAR:=value}"'), then the defaults of megatron_scale/recipe/settings.py (the tiny demo).
# This script finds the checkout and the Python, then hands over to the launcher,
# megatron_scale/recipe/launch.py: the steps (what each skips because it is done, so a requeued
# job resumes), srun or torchrun, and what USR1 / TERM do (save, stop, requeue).
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
SCALE_JOB_START=$(date +%s)   # "so far" in each step's header: this run's time
if [ -z "${SCALE_REPO:-}" ]; then   # sbatch runs a copy of this file, so $0 is no guide there
  if [ -n "${SLURM_JOB_ID:-}" ]; then SCALE_REPO=${SLURM_SUBMIT_DIR:-$PWD}
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

if [ -z "${PYTHON:-}" ]; then   # what every step runs with
  if [ -n "${CONTAINER_IMAGE:-}" ]; then PYTHON=python
  elif [ -n "${VENV:-}" ]; then PYTHON=$VENV/bin/python
  else PYTHON=$(bash "$SCALE_REPO/tools/venv.sh"); fi  # the tests' .venv, made here on a fresh clone
fi
RECIPE=$PYTHON   # the launcher is standard library only: with a container image, the host's python3 runs it
[ -z "${CONTAINER_IMAGE:-}" ] || RECIPE=python3
export SCALE_JOB_START SCALE_REPO SCALE_CONFIG PYTHON
exec "$RECIPE" -m megatron_scale.recipe run "${@:2}"
