"""superinfer: SLO-keeping LLM serving under memory pressure."""
__version__ = "0.1.0"
