#!/usr/bin/env bash
# The GPU side of this repository in one command, on a machine with one CUDA GPU (an H100 node):
#
#   bash tools/gpu_check.sh [--kit DIR [--work DIR] | --wheels DIR | --skip-install] [--out DIR]
#                           [--skip-tests] [--skip-bench] [--bench-flags "FLAGS"]
#
# Needs: Python 3.12 with a CUDA build of PyTorch (the machine's own; it is never replaced), a GPU.
# Installs into that Python, keeping its torch: megatron-core 0.19.2, Transformer Engine
# (optional: its tests skip, saying so, where it is absent), pytest. apex is used where present.
# Three ways to install:
#   --kit DIR       no network (docs/gpu.md): the one-call kit's main/ folder (python3 tools/gpukit
#                   build). It is checked against this node first (every file's sha256; torch, CUDA
#                   and GPU architecture as the kit was built for: one line per difference), then the
#                   GPU, then installed with pip --no-index --no-deps; the project runs from this
#                   checkout (PYTHONPATH), not installed. --work: where a fallback joins or builds
#                   (default runs/gpukit-work; never under --out).
#   (default)       from a package index: pip install megatron-core, -e ., transformer-engine[pytorch].
#   --wheels DIR    only from that folder (pip --no-index --find-links DIR).
# --skip-install installs nothing (what is there is used). With --kit or --skip-install, pip is
# never pointed at an index (PIP_NO_INDEX=1, PIP_CONFIG_FILE=/dev/null).
# Then it runs:
#   1. the GPU tests (--skip-tests leaves them out): pytest -m "gpu or te" (every method trained,
#      saved and resumed on the GPU, conversion with --verify on CUDA, the biography benchmark on
#      CUDA, the TE/FP8 tests);
#   2. tools/bench_scale.py in its GPU mode (--skip-bench leaves it out): bf16 local, bf16
#      Transformer Engine, FP8 hybrid delayed and tensorwise (TE ones only where TE imports), each
#      with --bench-flags added (e.g. the Llama-1B shape of docs/gpu.md: the default shape is
#      launch-bound on an H100).
# Only logs and JSON go to OUT (default runs/gpu_check): versions.txt, pytest.log, bench_*.json and
# bench_*.txt; nothing large, so OUT may be a folder whose files are sent back.
set -euo pipefail
cd "$(dirname "$0")/.."

KIT="" WORK="runs/gpukit-work" WHEELS="" OUT="runs/gpu_check" INSTALL=1 TESTS=1 BENCH=1 BENCH_FLAGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kit) KIT="${2:?--kit needs a folder}"; shift 2 ;;
    --work) WORK="${2:?--work needs a folder}"; shift 2 ;;
    --wheels) WHEELS="${2:?--wheels needs a folder}"; shift 2 ;;
    --out) OUT="${2:?--out needs a folder}"; shift 2 ;;
    --skip-install) INSTALL=0; shift ;;
    --skip-tests) TESTS=0; shift ;;
    --skip-bench) BENCH=0; shift ;;
    --bench-flags) BENCH_FLAGS="${2?--bench-flags needs a string}"; shift 2 ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
PY="${PYTHON:-python3}"
if [ -n "$WHEELS" ] && [ ! -d "$WHEELS" ]; then
  echo "gpu_check.sh: --wheels $WHEELS is not a folder" >&2; exit 2
fi
if [ -n "$KIT" ] && { [ -n "$WHEELS" ] || [ "$INSTALL" = 0 ]; }; then
  echo "gpu_check.sh: --kit installs from the kit; it cannot be combined with --wheels or --skip-install" >&2; exit 2
fi
if [ -n "$KIT" ] || [ "$INSTALL" = 0 ]; then  # offline: no pip call may consult an index
  export PIP_NO_INDEX=1 PIP_CONFIG_FILE=/dev/null
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ -n "$KIT" ]; then  # the kit against this node first: a bad file or a mismatch is named before the GPU
  python3 tools/gpukit check "$KIT" --python "$PY" || exit 1
fi
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_check.sh: no CUDA device visible to $PY (torch.cuda.is_available() is False); run it on a GPU node" >&2
  exit 1
fi
mkdir -p "$OUT"
torch_before=$("$PY" -c 'import torch; print(torch.__version__)')

pip_install() {  # pip install "$@" from the index, or from --wheels only; never touching torch
  if [ -n "$WHEELS" ]; then
    "$PY" -m pip install -q --no-index --find-links "$WHEELS" "$@"
  else
    "$PY" -m pip install -q "$@"
  fi
}

if [ -n "$KIT" ]; then
  python3 tools/gpukit install "$KIT" --python "$PY" --require-gpu --work "$WORK" || exit 1
elif [ "$INSTALL" = 1 ]; then
  pip_install --no-deps "megatron-core==0.19.2"
  pip_install "pytest>=8" "pytest-xdist>=3.5"
  pip_install -e .  # its torch requirement is a floor: the machine's CUDA torch satisfies it
  pip_install "transformer-engine[pytorch]" \
    || echo "gpu_check.sh: Transformer Engine could not be installed; its tests will skip, saying so" >&2
fi
torch_after=$("$PY" -c 'import torch; print(torch.__version__)')
if [ "$torch_before" != "$torch_after" ]; then
  echo "gpu_check.sh: the install replaced torch $torch_before with $torch_after; restore it and use --skip-install" >&2
  exit 1
fi
"$PY" -m megatron_scale.selfcheck 2>&1 | tee "$OUT/versions.txt" || true

status=0
if [ "$TESTS" = 1 ]; then
  "$PY" -m pytest -q -p no:cacheprovider -m "gpu or te" -rs tests 2>&1 | tee "$OUT/pytest.log" || status=1
fi

if [ "$BENCH" = 1 ]; then
  have_te=$("$PY" -c 'from megatron_scale.model.layers.te import te_available; print(int(te_available()))')
  runs=("local_bf16:--bf16 --peak-tflops 989")
  if [ "$have_te" = 1 ]; then
    runs+=("te_bf16:--bf16 --transformer-impl transformer_engine --peak-tflops 989"
           "te_fp8_delayed:--bf16 --transformer-impl transformer_engine --fp8-format hybrid --fp8-recipe delayed --peak-tflops 1979"
           "te_fp8_tensorwise:--bf16 --transformer-impl transformer_engine --fp8-format hybrid --fp8-recipe tensorwise --peak-tflops 1979")
  fi
  read -r -a extra <<< "$BENCH_FLAGS"
  for run in "${runs[@]}"; do
    name=${run%%:*}
    read -r -a flags <<< "${run#*:}"
    echo "== tools/bench_scale.py --device cuda ${flags[*]} ${extra[*]}"
    "$PY" tools/bench_scale.py --device cuda "${flags[@]}" "${extra[@]}" --out "$OUT/bench_$name.json" 2>&1 \
      | tee "$OUT/bench_$name.txt" || status=1
  done
fi
echo "gpu_check.sh: outputs in $OUT; $([ "$status" = 0 ] && echo 'every step passed' || echo 'a step FAILED (see above)')"
exit "$status"
