"""Policy variants in ``bench vllm --policies``: ``POLICY@KNOB=VALUE[+KNOB=VALUE...]`` runs ``POLICY`` with those
knobs of the core's table set for that run only, so one run can pair a policy against itself with one knob
changed (interleaved per seed on the same requests, like any two policies). The label is the policy's name in
the runs, the summary and ``--pairs`` (e.g. ``--policies lvf,lvf@tbt_credit=1 --pairs lvf@tbt_credit=1:lvf``).
Besides the knobs, the engine settings of :data:`ENGINE_SETTINGS` (``vllm@async_scheduling=1``: vLLM's async
scheduling, which its CPU platform would switch off; :mod:`superinfer.bench.engine.asyncmode`).
"""

from __future__ import annotations

from typing import Any

from superinfer.core import KnobError, check_knob


#: engine settings a variant may set besides the knobs: name -> the values it takes
ENGINE_SETTINGS: dict[str, tuple[int, ...]] = {"async_scheduling": (0, 1)}


class VariantError(ValueError):
    """A label whose policy or knobs are not valid; the message names the label and the part."""


def split_variant(label: str, policies: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    """(engine policy, knob overrides) of ``label``; raises :class:`VariantError` naming what is wrong."""
    policy, sep, rest = label.partition("@")
    if policy not in policies:
        raise VariantError(f"{label!r}: unknown policy {policy!r}; valid: {', '.join(policies)}")
    if not sep:
        return policy, {}
    overrides: dict[str, Any] = {}
    for part in rest.split("+"):
        name, eq, text = part.partition("=")
        if not eq or not name or not text:
            raise VariantError(f"{label!r}: expected KNOB=VALUE after '@', got {part!r}")
        if name in overrides:
            raise VariantError(f"{label!r}: {name} given twice")
        try:
            value = float(text)
        except ValueError:
            raise VariantError(f"{label!r}: {name} must be a number, got {text!r}") from None
        if name in ENGINE_SETTINGS:
            if value not in ENGINE_SETTINGS[name]:
                raise VariantError(f"{label!r}: {name} takes {' or '.join(map(str, ENGINE_SETTINGS[name]))}, "
                                   f"got {text!r}")
            overrides[name] = int(value)
            continue
        try:
            overrides[name] = check_knob(name, int(value) if value.is_integer() else value)
        except KnobError as exc:
            raise VariantError(f"{label!r}: {exc}") from None
    return policy, overrides
