#!/bin/sh
# The grounded twin with the plugin scheduling asynchronously as vLLM does (2026-12-07, RotaAsyncScheduler):
# the grounded_v2 commands re-run with --host-overlap auto's new meaning. Run from the repository root.
set -e
O=bench/results/costmodel/grounded_v3
S="superinferd"
run() { name=$1; shift; .venv/bin/$S "$@" --json $O/$name.json > $O/$name.txt 2>&1; echo "done $name $(date +%T)"; }
G="--hardware gh200 --duration 120 --seeds 3 --policies vllm,vllm-offload,sarathi,lvf-hbm,lvf --max-num-seqs 16384 --max-num-batched-tokens 16384 --dram-gib 400 --gpu-costs grounded --workers 2"
run grid_sharegpt_qwen_grounded bench sim --model qwen2.5-32b --workload sharegpt --rps 20,25,30,35 $G
run grid_sharegpt_llama_grounded bench sim --model llama-3-8b --workload sharegpt --rps 60,80,100 $G
run grid_azure_qwen_grounded bench sim --model qwen2.5-32b --workload ../shared/data/traces/azure_conv_2023.csv --rps 4,5,6,7,8,10 $G
run grid_bursty_qwen_grounded bench sim --model qwen2.5-32b --workload sharegpt --arrival gamma:0.5 --rps 20,25,30 $G
run sim_sharegpt_grounded bench sim --model qwen2.5-32b --hardware gh200 --workload sharegpt --rps 15,20,25,30 --duration 60 --policies vllm,sarathi,lvf --seeds 3 --max-num-seqs 16384 --max-num-batched-tokens 16384 --dram-gib 400 --gpu-costs grounded --workers 2
R="--model qwen2.5-32b --hardware gh200 --duration 3600 --ttft-slo 10 --tbt-slo 0.1 --max-queue-s 40 --seeds 2 --dram-gib 400 --workers 2 --gpu-costs grounded"
# only the plugin's policies are priced differently from grounded_v2 (stock policies were asynchronous already)
run sim_reasoning_1h_gh200_grounded bench sim --workload reasoning --rps 1,1.5,2,2.5,3 --policies lvf-hbm,lvf $R
run sim_servegen_1h_gh200_grounded bench sim --workload servegen:../shared/data/servegen/deepseek-r1 --rps 2,3,4,5,6 --policies lvf-hbm,lvf $R
# a stock run priced as before: identical to grounded_v2's (the twin is deterministic per seed)
run check_sarathi_reasoning_1.5 bench sim --workload reasoning --rps 1.5 --policies sarathi $R
