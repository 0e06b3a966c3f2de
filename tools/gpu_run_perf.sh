# shellcheck shell=bash
# tools/gpu_run.sh's perf1 and perf2 runs (sourced by it; docs/gpu.md "The perf window"): issue 64's
# measurements as two budgeted calls on one warm machine, each returning at most 8 files, JSON first.
#
# perf1  the kit (skipped where TE imports), a smoke test that also checks TE's functional calls as
#        te_fused.py makes them and a CUDA graph (selfcheck --te-fused --graphs: the TE smoke failing
#        is exit 3; the fused or graph check failing drops those rows, saying so), the te_fused and
#        graph GPU tests, then bench rows at Llama-3.2-1B's shape (seq 4096, TE bf16, full_ft against
#        Preserve): today's composition, the one-node linears, + fusions, + CUDA graph, the graph without
#        the one-node linears, 8 microbatches on the entry's optimizer, micro-batch 4, and Preserve with
#        the full base backward (preserve_full: every other Preserve row skips it, bench_scale's default
#        since issue 62) -> bench_1b.tgz (the JSONs), perf1.md (one table)
# perf2  FP8 tensorwise at the 1B shape, bf16 and FP8 at Llama-3.1-8B's widths (16 layers, seq 8192,
#        4 microbatches), then the training entry itself (random tokens, 12 iterations, GA 8, megatron-core's
#        DDP and distributed optimizer, the fusions, whole-iteration CUDA graphs, --peak-tflops): full
#        fine-tuning and Preserve -> bench_8b.tgz, train.tgz (the metrics.jsonl files), perf2.md
#
# PERF_GRAPHS=0 drops the CUDA-graph settings (perf2, after perf1's graph rows failed), PERF_FUSED=0 the
# one-node linears. --rehearse: tiny and local on the CPU; what needs TE or CUDA is skipped, saying so.

FUSIONS=rope,swiglu,ce

perf_setup() {  # sets L, L8, b1 (the 1B bench line), b8, F (the fused and fusion flags), G (graph), T (the entry)
  L=16 L8=16
  [[ "$GPU" =~ ,\ ([0-9]+)\ MiB ]] && ((BASH_REMATCH[1] < 120000)) && L=8 L8=8   # an H100's 80 GB
  if [ "$REHEARSE" = 1 ]; then
    b1=("$PY" tools/bench_scale.py --device cpu --hidden 64 --heads 8 --groups 4 --ffn 128 --vocab 256 --seq 32
        --layers 2 --scopes model --refs full_ft --methods preserve --warmup 1 --repeats 2 --isolate)
    b8=() F=() G=()
    T=("$PY" -m torch.distributed.run --standalone --nproc-per-node 1 -m megatron_scale.train --num-layers 2
       --hidden-size 64 --num-attention-heads 8 --num-query-groups 4 --ffn-hidden-size 128 --vocab-size 256
       --seq-length 32 --micro-batch-size 1 --global-batch-size 2 --train-iters 3 --lr 1e-4 --device cpu
       --data-path "$W/data/rand_text_document" --split 100/0/0 --log-interval 1 --peak-tflops 1)
    return
  fi
  b1=("$PY" tools/bench_scale.py --device cuda --bf16 --hidden 2048 --heads 32 --groups 8 --ffn 8192 --vocab 128256
      --seq 4096 --layers "$L" --scopes model --refs full_ft --methods preserve --repeats 5 --peak-tflops 989
      --transformer-impl transformer_engine)
  b8=("$PY" tools/bench_scale.py --device cuda --bf16 --hidden 4096 --heads 32 --groups 8 --ffn 14336 --vocab 128256
      --seq 8192 --layers "$L8" --scopes model --refs full_ft --methods preserve --microbatches 4 --repeats 4
      --transformer-impl transformer_engine)
  F=(--fusions "$FUSIONS") G=(--cuda-graph step)
  [ "${PERF_FUSED:-1}" = 1 ] && F+=(--scale-te-linear fused)
  [ "${PERF_GRAPHS:-1}" = 1 ] || G=()
  local fused=() graph=(--cuda-graph-impl full_iteration)
  [ "${PERF_FUSED:-1}" = 1 ] && fused=(--scale-te-linear fused)
  [ "${PERF_GRAPHS:-1}" = 1 ] || graph=()
  T=("$PY" -m torch.distributed.run --standalone --nproc-per-node 1 -m megatron_scale.train --num-layers "$L"
     --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8 --ffn-hidden-size 8192 --vocab-size 128256
     --seq-length 4096 --micro-batch-size 1 --global-batch-size 8 --train-iters 12 --lr 1e-4 --bf16 --device cuda
     --transformer-impl transformer_engine --gradient-accumulation-fusion --use-distributed-optimizer "${fused[@]}"
     --apply-rope-fusion --bias-swiglu-fusion --cross-entropy-loss-fusion "${graph[@]}" --peak-tflops 989
     --data-path "$W/data/rand_text_document" --split 100/0/0 --log-interval 1)
}

perf_row() {  # NAME LIMIT NEEDS(te|graph|fused|-) BENCH-FLAGS...: one bench row into $W/bench/NAME.json
  local name=$1 limit=$2 needs=$3
  shift 3
  if [ "$REHEARSE" = 1 ] && [ "$needs" != - ]; then
    skip "$name" "needs Transformer Engine and CUDA ($needs; --rehearse runs on the CPU)"; return
  fi
  if [ "$needs" = graph ] && [ "${PERF_GRAPHS:-1}" != 1 ]; then skip "$name" "PERF_GRAPHS=0"; return; fi
  if [ "$needs" = fused ] && [ "${PERF_FUSED:-1}" != 1 ]; then skip "$name" "PERF_FUSED=0"; return; fi
  mkdir -p "$W/bench"
  phase "$name" "$limit" "$@" --out "$W/bench/$name.json"
}

perf_smoke() {  # the TE smoke test (exit 3 on failure) and the fused / graph checks (their rows dropped)
  if [ "$REHEARSE" = 1 ]; then
    phase smoke 60 "$PY" -m megatron_scale.selfcheck --te-fused --graphs || finish 1
    return
  fi
  phase smoke 60 bash -c "'$PY' -m megatron_scale.selfcheck --require-gpu --te-fused --graphs | tee '$W/selfcheck.txt';
    grep -Eq '^ok +fp8 step' '$W/selfcheck.txt'" || {
    note "FALLBACK (docs/gpu.md): the TE smoke test failed; give the machine back, see the te run's fallbacks"
    EXTRA=", \"fallback\": \"smoke failed\""; finish 3
  }
  grep -Eq '^ok +te fused calls' "$W/selfcheck.txt" || { PERF_FUSED=0; note "te fused calls failed: PERF_FUSED=0"; }
  grep -Eq '^ok +graphs step' "$W/selfcheck.txt" || { PERF_GRAPHS=0; note "graphs step failed: PERF_GRAPHS=0"; }
  EXTRA="$EXTRA, \"perf_fused\": ${PERF_FUSED:-1}, \"perf_graphs\": ${PERF_GRAPHS:-1}"; json
}

perf_pack() {  # TGZ MD NAME...: the JSONs into OUT/TGZ, one table into OUT/MD
  local tgz=$1 md=$2 files=()
  shift 2
  for n in "$@"; do [ -f "$W/bench/$n.json" ] && files+=("bench/$n.json"); [ -f "$W/$n.jsonl" ] && files+=("$n.jsonl"); done
  if [ "${#files[@]}" = 0 ]; then note "== pack: nothing to pack into $tgz"; return; fi
  tar czf "$O/$tgz" -C "$W" "${files[@]}"
  "$PY" tools/perf_summary.py --out "$O/$md" "${files[@]/#/$W/}" >> "$LOG" 2>&1 || note "perf_summary failed"
}

run_perf1() {
  local L L8 b1 b8 F G T
  install_kit
  perf_smoke
  perf_setup
  local pt=("$PY" -m pytest -q -p no:cacheprovider -rs -p no:xdist tests/model/test_te_fused_gpu.py tests/test_graphs_gpu.py)
  if [ "$REHEARSE" = 1 ]; then phase tests 60 "${pt[@]}" --collect-only; else phase tests 90 "${pt[@]}"; fi
  perf_row b1_modules 60 te "${b1[@]}"
  perf_row b1_fused 60 fused "${b1[@]}" --scale-te-linear fused
  perf_row b1_fusions 70 te "${b1[@]}" "${F[@]}"
  perf_row b1_graph 60 graph "${b1[@]}" "${F[@]}" "${G[@]}"
  local ga=(--microbatches 8 --optimizer megatron)
  [ "$REHEARSE" = 1 ] && ga=(--microbatches 2 --optimizer megatron --bf16)
  perf_row b1_ga8 75 - "${b1[@]}" "${F[@]}" "${ga[@]}"
  perf_row b1_graph_modules 60 graph "${b1[@]}" --fusions "$FUSIONS" "${G[@]}"
  perf_row b1_mbs4 75 graph "${b1[@]}" "${F[@]}" "${G[@]}" --batch 4
  perf_row b1_full_backward 45 - "${b1[@]}" "${F[@]}" "${ga[@]}" --methods preserve_full
  perf_pack bench_1b.tgz perf1.md b1_modules b1_fused b1_fusions b1_graph b1_ga8 b1_graph_modules b1_mbs4 \
    b1_full_backward
  finish 0
}

run_perf2() {
  local L L8 b1 b8 F G T
  install_kit
  perf_setup
  perf_row b1_fp8 60 te "${b1[@]}" --fusions "$FUSIONS" "${G[@]}" --fp8-format hybrid --fp8-recipe tensorwise \
    --peak-tflops 1979
  perf_row b8_bf16 90 te "${b8[@]}" "${F[@]}" --peak-tflops 989
  perf_row b8_fp8 90 te "${b8[@]}" --fusions "$FUSIONS" --fp8-format hybrid --fp8-recipe tensorwise --peak-tflops 1979
  local tokens=500000 vocab=128256
  [ "$REHEARSE" = 1 ] && tokens=20000 vocab=256
  phase data 30 "$PY" tools/make_random_dataset.py --vocab "$vocab" --tokens "$tokens" --out "$W/data/rand"
  phase train_full 75 "${T[@]}" --method full --metrics-file "$W/train_full.jsonl"
  phase train_preserve 75 "${T[@]}" --method scale-preserve --metrics-file "$W/train_preserve.jsonl"
  perf_pack bench_8b.tgz perf2_bench.md b1_fp8 b8_bf16 b8_fp8
  perf_pack train.tgz perf2.md train_full train_preserve
  finish 0
}
