#!/usr/bin/env bash
# The fitted GPU terms on profiles they were not fitted on (issue 29's held-out target: median <= 10 %,
# P90 <= 25 %). For each GPU, fit on some models' files and score the others':
#
#     bench/costmodel_heldout.sh [OUT_DIR]        # default bench/results/costmodel
#
# Writes heldout_<gpu>.json (the score of the held-out model) and heldout.txt. Runs in a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench/results/costmodel}"
SI="${SUPERINFERD:-.venv/bin/superinferd}"
P=superinfer/bench/costmodel/profiles/compute
mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$OUT/heldout.txt"
while read -r gpu train test; do
  mkdir -p "$tmp/$gpu/train/compute/$gpu" "$tmp/$gpu/test/compute/$gpu"
  for m in ${train//,/ }; do cp -r "$P/$gpu/$m" "$tmp/$gpu/train/compute/$gpu/"; done
  cp -r "$P/$gpu/$test" "$tmp/$gpu/test/compute/$gpu/"
  "$SI" calibrate --profiles "$tmp/$gpu/train" -o "$tmp/$gpu/terms.json" > /dev/null
  "$SI" bench costmodel --profiles "$tmp/$gpu/test" --terms "$tmp/$gpu/terms.json" --json "$OUT/heldout_$gpu.json" \
    > "$tmp/$gpu/score.txt"
  sed -n 1p "$tmp/$gpu/score.txt" | sed "s/^/$gpu: fitted on $train, scored on $test: /" | tee -a "$OUT/heldout.txt"
done <<'LIST'
a100 llama-3-8b phi-2
h100 llama-2-70b llama-2-7b
h200 llama-3-70b,qwen2.5-32b llama-3-8b
LIST
