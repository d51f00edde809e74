"""The real-engine benchmark behind `superinferd bench vllm` and `superinferd calibrate`: replays (replay),
paired statistics (paired, text), host load (hostload), the tiny test model (tiny), vLLM's scheduler-test
construction (synthetic) and step-time calibration (calibrate). Measurement tools, not the plugin: vLLM
loads only ``superinfer.vllm``. Importing this package is cheap (no vLLM, no torch)."""
