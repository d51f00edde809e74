"""``superinferd start | stop | status | config show | config check``. Exit codes: 0 ok, 1 failure, 2 usage or
configuration error, 3 not running."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import click

EXIT_FAIL, EXIT_CONFIG, EXIT_NOT_RUNNING = 1, 2, 3

profile_opt = click.option("--profile", "profile", default=None, help="Profile name (default: $SUPERINFER_PROFILE or chat).")
profile_file_opt = click.option("--profile-file", type=click.Path(dir_okay=False), default=None,
                                help="Use this profile file instead of searching.")
state_dir_opt = click.option("--state-dir", type=click.Path(file_okay=False), default=None,
                             help="State directory (default: $STATE_DIRECTORY, else $XDG_STATE_HOME/superinfer).")
set_opt = click.option("--set", "sets", multiple=True, metavar="SECTION.KEY=VALUE",
                       help="Override one profile key (repeatable); beats env and profile.")


def _config(profile, profile_file, flags, sets):
    from superinfer.daemon.config import resolve
    from superinfer.daemon.profiles import ProfileError

    try:
        return resolve(profile, profile_file=profile_file, flags=flags, sets=sets)
    except ProfileError as exc:
        click.echo(f"superinferd: configuration error: {exc}", err=True)
        sys.exit(EXIT_CONFIG)


def _setup_logging() -> None:
    level = os.environ.get("SUPERINFER_LOG_LEVEL", "INFO").upper()
    fmt = "%(levelname)s %(name)s: %(message)s" if os.environ.get("INVOCATION_ID") else \
        "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(level=getattr(logging, level, logging.INFO), format=fmt, stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)


@click.command("start")
@profile_opt
@profile_file_opt
@click.option("--backend", type=click.Choice(["auto", "vllm", "sim"]), default=None,
              help="Engine: vllm, sim (digital twin) or auto (vllm when possible). Default auto.")
@click.option("--host", default=None, help="Control API address (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Control API port (default 8780; 0 = any free port).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default=None, help="Probe / vLLM device.")
@click.option("--engine-port", type=int, default=None, help="vllm backend: loopback port of the vLLM child.")
@state_dir_opt
@set_opt
def start(profile, profile_file, backend, host, port, device, engine_port, state_dir, sets) -> None:
    """Run the daemon in the foreground (as systemd expects)."""
    _setup_logging()
    flags = {"backend": backend, "host": host, "port": port, "device": device, "engine_port": engine_port,
             "state_dir": state_dir}
    cfg = _config(profile, profile_file, flags, sets)
    from superinfer.daemon.errors import StartError
    from superinfer.daemon.lifecycle import AlreadyRunning
    from superinfer.daemon.server import run

    try:
        code = run(cfg)
    except KeyboardInterrupt:  # before the serving loop handles signals (preflight, the tiny build)
        click.echo("superinferd: interrupted before serving started", err=True)
        sys.exit(130)
    except AlreadyRunning as exc:
        click.echo(f"superinferd: {exc}", err=True)
        sys.exit(EXIT_FAIL)
    except StartError as exc:
        for line in str(exc).splitlines():
            click.echo(f"superinferd: {line}", err=True)
        sys.exit(exc.code)
    except PermissionError as exc:
        click.echo(f"superinferd: {exc}", err=True)
        sys.exit(EXIT_FAIL)
    sys.exit(code)


def _state_dir(state_dir: str | None) -> Path:
    if state_dir:
        return Path(state_dir).expanduser()
    if os.environ.get("SUPERINFER_STATE_DIR"):
        return Path(os.environ["SUPERINFER_STATE_DIR"]).expanduser()
    from superinfer.daemon.config import default_state_dir

    return Path(default_state_dir()[0])


@click.command("status")
@state_dir_opt
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def status(state_dir, as_json) -> None:
    """Is a daemon running on the state dir? Exit 0 if so (with a summary), 3 if not (with the last run's
    error, if it failed)."""
    from superinfer.daemon.lifecycle import running_daemon

    sd = _state_dir(state_dir)
    run = running_daemon(sd)
    if run is None:
        last = _last_run(sd)
        if as_json:
            click.echo(json.dumps({"running": False, "state_dir": str(sd), "last_run": last}))
        else:
            click.echo(f"superinferd is not running (state dir {sd})")
            if last is not None and last.get("error"):
                click.echo(f"  last run (profile {last.get('profile')}, stopped {last.get('stopped')}) failed: "
                           f"{last['error']}")
        sys.exit(EXIT_NOT_RUNNING)
    info = {"running": True, "state_dir": str(sd), "pid": run.pid, **run.runtime}
    url = run.runtime.get("url")
    if url:
        import httpx

        try:
            r = httpx.get(url + "/v1/state", timeout=5.0)
            s = r.json()
            info["state"] = {k: s.get(k) for k in ("status", "error", "backend", "simulation", "model", "profile",
                                                    "uptime_s", "queues", "counters")}
        except (httpx.HTTPError, ValueError) as exc:
            info["state_error"] = f"{type(exc).__name__}: {exc}"
    if as_json:
        click.echo(json.dumps(info))
        return
    sim = " (SIMULATION)" if info.get("simulation") else ""
    click.echo(f"superinferd running: pid {run.pid}, profile {info.get('profile')}, backend "
               f"{info.get('backend')}{sim}, {url or '?'}")
    st = info.get("state")
    if st:
        q, c = st.get("queues") or {}, st.get("counters") or {}
        click.echo(f"  status {st.get('status')}, uptime {st.get('uptime_s')} s, queues {q}, "
                   f"arrived {c.get('arrived')}, finished {c.get('finished')}")
        if st.get("error"):
            click.echo(f"  error: {st['error']}")
    elif "state_error" in info:
        click.echo(f"  control API not answering: {info['state_error']}")


def _last_run(sd: Path) -> dict | None:
    """What the last daemon on ``sd`` left in ``state.json``: profile, when it stopped, its error."""
    from superinfer.daemon.lifecycle import STATE_FILE, read_json

    saved = read_json(sd / STATE_FILE)
    if saved is None:
        return None
    stopped = saved.get("stopped_at")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stopped)) if isinstance(stopped, (int, float)) else None
    return {"profile": saved.get("profile"), "backend": saved.get("backend"), "stopped": when,
            "error": saved.get("error"), "counters": saved.get("counters")}


@click.command("stop")
@state_dir_opt
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds to wait for the drain.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def stop(state_dir, timeout, as_json) -> None:
    """Send SIGTERM (drain, persist, exit) and wait. Exit 0 stopped, 1 still running, 3 not running."""
    from superinfer.daemon.lifecycle import running_daemon

    sd = _state_dir(state_dir)
    run = running_daemon(sd)
    if run is None:
        if as_json:
            click.echo(json.dumps({"stopped": False, "running": False, "state_dir": str(sd)}))
        else:
            click.echo(f"superinferd is not running (state dir {sd})", err=True)
        sys.exit(EXIT_NOT_RUNNING)
    try:
        os.kill(run.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and running_daemon(sd) is not None:
        time.sleep(0.1)
    stopped = running_daemon(sd) is None
    if as_json:
        click.echo(json.dumps({"stopped": stopped, "pid": run.pid, "state_dir": str(sd)}))
    else:
        click.echo(f"superinferd (pid {run.pid}) {'stopped' if stopped else 'still running after ' + str(timeout) + ' s'}",
                   err=not stopped)
    sys.exit(0 if stopped else EXIT_FAIL)


@click.group("config")
def config() -> None:
    """Inspect the effective configuration."""


@config.command("show")
@profile_opt
@profile_file_opt
@click.option("--backend", type=click.Choice(["auto", "vllm", "sim"]), default=None)
@click.option("--host", default=None)
@click.option("--port", type=int, default=None)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default=None)
@state_dir_opt
@set_opt
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: {section: {key: {value, source}}}.")
def config_show(profile, profile_file, backend, host, port, device, state_dir, sets, as_json) -> None:
    """Print every effective value and where it came from (flag, env, profile file, default)."""
    flags = {"backend": backend, "host": host, "port": port, "device": device, "state_dir": state_dir}
    cfg = _config(profile, profile_file, flags, sets)
    data = cfg.as_dict()
    if as_json:
        click.echo(json.dumps(data, indent=1))
        return
    click.echo(f"profile {cfg.profile}: {cfg.profile_path}")
    for section, keys in data.items():
        if section in ("profile", "tenants"):
            continue
        click.echo(f"[{section}]")
        for key, s in keys.items():
            click.echo(f"  {key:<24} = {json.dumps(s['value']):<24} # {s['source']}")
    click.echo(f"[tenants]  # {data['tenants']['source']}")
    for t in data["tenants"]["list"]:
        click.echo("  " + ", ".join(f"{k}={v}" for k, v in t.items()))


@config.command("check")
@profile_opt
@profile_file_opt
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default=None, help="Device vLLM would run on.")
@state_dir_opt
@set_opt
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: {ok, problems, notes, host, model}.")
def config_check(profile, profile_file, device, state_dir, sets, as_json) -> None:
    """Run the vllm backend's preflight (memory, KV, block size, layout, lengths) without starting anything.
    Exit 0 when the settings fit this host, 2 when not (one line per problem, with a value that would work)."""
    cfg = _config(profile, profile_file, {"device": device, "state_dir": state_dir}, sets)
    if not cfg.get("engine", "model_path"):
        msg = "the profile has no engine.model_path (or engine.tiny_model): only the sim backend can serve it"
        click.echo(json.dumps({"ok": True, "problems": [], "notes": [msg]}) if as_json else f"ok: {msg}")
        return
    from superinfer.daemon import preflight

    problems, host, model = preflight.run(cfg)
    if as_json:
        click.echo(json.dumps(preflight.report(problems, host, model), indent=1))
    else:
        gpus = "".join(f", GPU {i}: {f / 2**30:.1f} of {t / 2**30:.1f} GiB free" for i, (f, t) in enumerate(host.gpus))
        click.echo(f"host: {host.device}, {host.available / 2**30:.1f} of {host.total / 2**30:.1f} GiB of memory "
                   f"available{gpus}")
        if model.local:
            click.echo(f"model: {model.path}: weights {(model.weights or 0) / 2**20:.1f} MiB, max_position_embeddings "
                       f"{model.max_position}, one KV block {model.block_bytes} bytes per rank")
        for note in model.notes:
            click.echo(f"note: {note}")
        for p in problems:
            click.echo(f"problem: {p}", err=True)
        if not problems:
            click.echo(f"ok: profile {cfg.profile} fits this host")
    sys.exit(EXIT_CONFIG if problems else 0)
