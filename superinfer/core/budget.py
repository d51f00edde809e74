"""The per-iteration transfer budget of design §4.

``B_xfer = floor(eta * BW * t_iter / block_bytes)`` blocks per iteration **per direction**, where BW is the
measured per-direction bandwidth *while both directions run*, ``t_iter`` the engine's iteration time and
``eta`` (about 0.8) the share of the iteration the copies may use. The bandwidth probe, the simulator and
the daemon all call this one function.
"""

from __future__ import annotations

import math

DEFAULT_ETA = 0.8


def b_xfer_blocks(
    duplex_bw_bytes_per_s: float, iteration_s: float, block_bytes: int, eta: float = DEFAULT_ETA
) -> int:
    """Blocks that fit one direction of one iteration (design §4). Raises ValueError on bad input."""
    for name, value in (("duplex_bw_bytes_per_s", duplex_bw_bytes_per_s), ("iteration_s", iteration_s)):
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    if int(block_bytes) != block_bytes or block_bytes <= 0:
        raise ValueError(f"block_bytes: expected an integer > 0, got {block_bytes!r}")
    if not (0 < eta <= 1):
        raise ValueError(f"eta: expected 0 < eta <= 1, got {eta!r}")
    return int(math.floor(eta * duplex_bw_bytes_per_s * iteration_s / block_bytes))
