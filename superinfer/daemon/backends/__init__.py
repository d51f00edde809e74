"""Engine backends of the daemon: ``sim`` (the digital twin, real time) and ``vllm`` (vLLM + plugin).

Both implement :class:`superinfer.daemon.backends.base.Backend`; the server picks one with
:func:`superinfer.daemon.backends.select.choose_backend`.
"""
