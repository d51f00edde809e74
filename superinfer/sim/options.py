"""Comma-separated option values shared by the twin's and the benches' command lines."""

from __future__ import annotations

from collections.abc import Callable

import click


def _positive(value: str, name: str, cast: Callable[[str], float], what: str) -> list:
    try:
        out = [cast(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated {what}, got {value!r}", param_hint=name) from None
    if not out or any(x <= 0 for x in out):
        raise click.BadParameter(f"expected {what} > 0, got {value!r}", param_hint=name)
    return out


def positive_floats(value: str, name: str) -> list[float]:
    """``"20,30"`` -> ``[20.0, 30.0]``; a click usage error naming ``name`` otherwise."""
    return _positive(value, name, float, "numbers")


def positive_ints(value: str, name: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``; a click usage error naming ``name`` otherwise."""
    return _positive(value, name, int, "integers")


def start_s_option(f: Callable) -> Callable:
    """``--start-s``: where in the day a ``servegen:DIR`` workload's replayed span starts."""
    return click.option("--start-s", default=None, type=click.FloatRange(min=0),
                        help="servegen: the second of the day the replayed span starts at "
                             "(default: the busiest window).")(f)


def with_start(workload: str | None, start_s: float | None) -> str | None:
    """``servegen:DIR`` and ``--start-s S`` -> ``servegen:DIR@S``; a click usage error for ``--start-s`` with any
    other workload; the workload unchanged without ``--start-s``."""
    from superinfer.sim.workload.servegen import PREFIX

    if start_s is None:
        return workload
    if not workload or not workload.startswith(PREFIX):
        raise click.BadParameter("only a servegen:DIR workload has a start in the day", param_hint="--start-s")
    return f"{workload}@{start_s:g}"


def knob_options(defaults: dict[str, float | int | None] | None = None,
                 note: Callable[[object], str] | None = None) -> Callable[[Callable], Callable]:
    """A decorator adding ``--<knob>`` for every knob of the core's table (``superinfer.core.KNOBS``), in table
    order: an int or float range from its bounds, its help, and its default, or ``defaults[name]`` where
    given (None: unset, so the consumer's default applies); ``note(knob)`` is appended to the help."""
    from superinfer.core import KNOBS

    defaults = defaults or {}

    def deco(f: Callable) -> Callable:
        for k in reversed(KNOBS):
            kind = click.IntRange(int(k.lo), int(k.hi)) if k.kind is int else click.FloatRange(k.lo, k.hi)
            default = defaults.get(k.name, k.default)
            f = click.option(k.option, k.name, default=default, show_default=default is not None, type=kind,
                             help=k.help + (note(k) if note else "") + ".")(f)
        return f

    return deco
