"""`superinferd bench fidelity`: the real vLLM engine against its calibrated twin on the same requests (run),
with the host terms measured on this engine (host, probes, shapes, steps, wake), the twin's side and its
errors (twin), the recorded runs (store) and the report (report); docs/fidelity.md. Measurement tools, not
the plugin: vLLM loads only ``superinfer.vllm``. Importing this package is cheap (no vLLM, no torch)."""
