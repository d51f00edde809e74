"""Engine backends of the daemon: ``sim`` (the digital twin, real time) and ``vllm`` (vLLM + plugin).

Both implement :class:`superinfer.daemon.backends.base.Backend` and see the daemon only through
:class:`superinfer.daemon.backends.base.Host`; the server picks one with
:func:`superinfer.daemon.backends.select.select_backend`.
"""
