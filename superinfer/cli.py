"""`superinferd`: the operator's command line.

Subcommands live next to the code they drive (benchmarks and `calibrate` in ``superinfer.bench``, which
only this module imports) and are loaded lazily, so `superinferd --help` stays fast and does not import
torch or vLLM. Each entry maps a command name to ``module:attribute`` of a click command. Exit codes
(design §7): 0 ok, 1 failure, 2 usage/config error, 3 not running.
"""

from __future__ import annotations

import importlib

import click

from superinfer import __version__


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when used."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._lazy:
            module_name, attr = self._lazy[cmd_name].split(":")
            module = importlib.import_module(module_name)
            cmd = getattr(module, attr)
            if not isinstance(cmd, click.Command):
                raise click.ClickException(f"{self._lazy[cmd_name]} is not a click command")
            return cmd
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=LazyGroup,
    lazy={
        "probe": "superinfer.duplexkv.cli:probe",
        "calibrate": "superinfer.bench.engine.calibrate:calibrate",
        "start": "superinfer.daemon.cli:start",
        "stop": "superinfer.daemon.cli:stop",
        "status": "superinfer.daemon.cli:status",
        "config": "superinfer.daemon.cli:config",
        "plan": "superinfer.sim.plan_cli:plan",
        "tune": "superinfer.daemon.tune_cli:tune",
        "top": "superinfer.tui.cli:top",
    },
)
@click.version_option(__version__, prog_name="superinferd")
def main() -> None:
    """superinferd: keep LLM serving inside its latency SLOs when GPU memory runs out."""


@main.group(
    cls=LazyGroup,
    lazy={
        "sched": "superinfer.bench.sched:bench_sched",
        "sim": "superinfer.bench.twin.cli:bench_sim",
        "figures": "superinfer.bench.twin.figures:figures",
        "kv": "superinfer.bench.kv.cli:bench_kv",
        "vllm": "superinfer.bench.engine.run:bench_vllm",
        "fidelity": "superinfer.bench.fidelity.run:bench_fidelity",
        "tuner": "superinfer.bench.tuner.cli:bench_tuner",
        "opprofile": "superinfer.bench.costmodel.cli:opprofile",
        "costmodel": "superinfer.bench.costmodel.cli:costmodel",
        "overhead": "superinfer.bench.engine.overhead:bench_overhead",
    },
)
def bench() -> None:
    """Benchmarks: scheduler overhead, simulator policy comparison, KV transfer ablation."""


if __name__ == "__main__":  # pragma: no cover
    main()
