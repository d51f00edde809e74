#!/usr/bin/env bash
# Everything this project measures on a lent GPU, as one prepared run (about 6 minutes, hard cap 9.5):
#
#     bench/gpu_session.sh [OUT_DIR]        # default OUT_DIR: bench/results/gpu
#
# 1. The GPU itself (nvidia-smi: part, memory, power limit, clocks, PCIe link) -> OUT_DIR/gpu.txt
# 2. One layer's operators and its attention per TP shard and token count for Qwen2.5-32B, Llama-3-70B,
#    Llama-3-8B (`superinferd bench opprofile`, issue 29) -> OUT_DIR/profiles/compute/<gpu>/<model>/
#    mlp.csv, attention.csv and meta.json (with the copy bandwidth and GEMM peak reached); scored by
#    `superinferd bench costmodel`.
# 3. DuplexKV on CUDA: its tests, the bandwidth probe and the Table 1 ablation (bench/gpu_check.sh)
#    -> OUT_DIR/duplexkv/ (SKIP_DUPLEXKV=1 leaves it out).
#
# Needs torch with CUDA, triton, numpy, click, pytest (the GPU image has them). PYTHON overrides the
# interpreter. DEVICE=cpu TOKENS=1,2 MODELS=llama-3-8b ATTENTION_POINTS=decode:2:64 test the plumbing on a
# machine without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-bench/results/gpu}"
mkdir -p "$OUT_DIR"
PY="${PYTHON:-python3}"
DEVICE="${DEVICE:-cuda}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  git rev-parse HEAD 2>/dev/null || true
  nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm,clocks.max.mem,pcie.link.gen.max,pcie.link.width.max,driver_version --format=csv 2>&1
  nvidia-smi -q 2>&1 | grep -iE "product (name|brand|architecture)|board part|form factor|module id|max power|power limit" | head -20
} > "$OUT_DIR/gpu.txt"
cat "$OUT_DIR/gpu.txt"

echo "== operator profile =="
args=(--out "$OUT_DIR/profiles" --gpu "${GPU_NAME:-h200}" --device "$DEVICE"
      --models "${MODELS:-qwen2.5-32b,llama-3-70b,llama-3-8b}" --deadline-s "${PROFILE_DEADLINE_S:-180}")
[[ -n "${TOKENS:-}" ]] && args+=(--tokens "$TOKENS")
[[ -n "${ATTENTION_POINTS:-}" ]] && args+=(--attention-points "$ATTENTION_POINTS")
timeout "${PROFILE_TIMEOUT_S:-260}" "$PY" -m superinfer.cli bench opprofile "${args[@]}" \
  > "$OUT_DIR/opprofile.json" 2> >(tee "$OUT_DIR/opprofile.log" >&2) || status=1
tail -c 1200 "$OUT_DIR/opprofile.json"

if [[ -z "${SKIP_DUPLEXKV:-}" ]]; then
  echo "== DuplexKV (bench/gpu_check.sh) =="
  GPU_CHECK_BUDGET_S="${GPU_CHECK_BUDGET_S:-300}" DEVICE="$DEVICE" bench/gpu_check.sh "$OUT_DIR/duplexkv" || status=1
fi
echo "results in $OUT_DIR (exit $status)"
exit $status
