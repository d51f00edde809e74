"""superinferd, the operator's daemon: profiles, effective configuration, control API, metrics, lifecycle.

One process owns one state directory (pid file under an flock). It serves a control API (FastAPI) and,
depending on the backend, either the digital twin (``sim``: the real scheduler core paced against the
wall clock, clearly labelled a simulation) or vLLM's OpenAI API with the superinfer plugin (``vllm``).
See docs/daemon.md for the operator's view and the API's field names.
"""
