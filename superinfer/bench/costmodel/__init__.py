"""The twin's GPU cost model against measured operator times (issue 29).

``ops`` says what one row of a Vidur-format profile means on one tensor-parallel rank; ``profile`` is the
project's own profiler that writes such rows on a lent GPU (``superinferd bench opprofile``); the scorer
prices the same rows with the twin's model (``superinferd bench costmodel``).
"""
