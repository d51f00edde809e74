#!/usr/bin/env bash
# DuplexKV on a GPU host (H200, GH200): correctness tests on CUDA, bandwidth probe, Table 1 ablation at
# paper scale (8 GiB each way, Qwen2.5-32B 16-token blocks = 4 MiB, or as much as fits). One command,
# about 2-4 minutes, hard cap 8 minutes:
#
#     bench/gpu_check.sh [OUT_DIR]          # default OUT_DIR: bench/results/gpu
#
# Needs torch with CUDA, triton, numpy, pytest; click is optional (without it the probe and bench are
# called from Python directly). PYTHON overrides the interpreter; DEVICE=cpu and MB=<MiB each way> exist
# only to smoke-test this script's plumbing on a machine without a GPU. Writes into OUT_DIR: env.txt,
# tests.txt (+ tests.xml), probe_llama-3-8b.json, probe_qwen2.5-32b.json, bench_kv.json, bench_kv.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bench/results/gpu}"
mkdir -p "$OUT"
if [[ -n "${PYTHON:-}" ]]; then PY="$PYTHON"
elif [[ -x .venv/bin/python ]] && .venv/bin/python -c 'import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then PY=.venv/bin/python
else PY=python3; fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
deadline=$((SECONDS + ${GPU_CHECK_BUDGET_S:-470}))
left() { local l=$((deadline - SECONDS)); ((l > 5)) && echo "$l" || echo 5; }
status=0
DEVICE="${DEVICE:-cuda}"

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  git rev-parse HEAD 2>/dev/null || true
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  "$PY" -c 'import torch, triton, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "device", torch.cuda.get_device_name(0))'
  "$PY" -c 'from superinfer.duplexkv.backends.cuda_backend import _load_cudart as f; print("cudaMemcpyBatchAsync binding:", f() is not None)'
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

echo "== tests (CUDA + CPU) =="
if "$PY" -c 'import pytest' 2>/dev/null; then
  timeout 200 "$PY" -m pytest -q -p no:cacheprovider -rs tests/duplexkv --junitxml="$OUT/tests.xml" 2>&1 | tee "$OUT/tests.txt"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
else
  echo "pytest missing: tests not run" | tee "$OUT/tests.txt"; status=1
fi

run_cli() {  # run_cli OUTFILE TIMEOUT ARGS...  (superinferd via click, else the Python API)
  local outfile=$1 t=$2; shift 2
  if "$PY" -c 'import click' 2>/dev/null; then
    timeout "$t" "$PY" -m superinfer.cli "$@" > "$outfile"
  else
    timeout "$t" "$PY" - "$@" > "$outfile" <<'PYEOF'
import json, sys
args = sys.argv[1:]
opt = lambda k, d: args[args.index(k) + 1] if k in args else d
from superinfer.sim.models import get_model
model = get_model(opt("--model", "llama-3-8b"))
if args[0] == "probe":
    from superinfer.duplexkv.probe import run_probe
    r = run_probe(model.kv_bytes_per_token * 16, device=opt("--device", "cuda")).as_dict()
    print(json.dumps({"model": model.name, "block_size": 16, **r}))
else:
    from superinfer.bench.kv.ablation import run_bench
    print(json.dumps(run_bench(model=model.name, device=opt("--device", "cuda"), bytes_each_way=int(opt("--total-mb", "8192")) << 20,
                               repeats=int(opt("--repeats", "3")))))
PYEOF
  fi
}

echo "== probe =="
for m in llama-3-8b qwen2.5-32b; do
  run_cli "$OUT/probe_$m.json" 60 probe --json --device "$DEVICE" --model "$m" || status=1
  cat "$OUT/probe_$m.json"; echo
done

# 8 GiB each way needs 2 x 8 GiB of HBM and 2 x 8 GiB of pinned DRAM; shrink to what is free.
[[ -n "${MB:-}" ]] || MB=$("$PY" - <<'PYEOF'
import os, torch
free, _ = torch.cuda.mem_get_info()
host = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
print(max(256, min(8192, int(free * 0.4) >> 21, int(host * 0.3) >> 21) // 4 * 4))
PYEOF
)
echo "== bench kv: ${MB} MiB each way =="
run_cli "$OUT/bench_kv.json" "$(left)" bench kv --json --device "$DEVICE" --model qwen2.5-32b --total-mb "$MB" --repeats 3 || status=1
"$PY" - "$OUT/bench_kv.json" <<'PYEOF' | tee "$OUT/bench_kv.txt"
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as exc:  # noqa: BLE001
    sys.exit(f"no bench result: {exc}")
print(f"{d['device_name']}: {d['model']}, {d['bytes_each_way'] >> 20} MiB each way")
for r in d["rows"]:
    print(f"{r['row']:<14}{r['ms']:>10.2f} ms{r['gbps']:>9.2f} GB/s  x{r['ratio_to_ideal']:.2f} of ideal  {r['impl']}")
print("full duplex >= 90% of ideal:", d.get("gpu_target_met"))
PYEOF
echo "results in $OUT (exit $status)"
exit $status
