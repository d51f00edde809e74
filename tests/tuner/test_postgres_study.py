"""A fleet's shared study: ``superinferd tune --jobs 2`` on a real PostgreSQL server that this test
starts on loopback and stops (Debian's ``postgresql`` package, installed by ``make test``).

The server runs as an unprivileged user (PostgreSQL refuses to run as root): ``postgres`` when the
package created it, else ``nobody``, through ``runuser``. It listens on 127.0.0.1 on a free port and on a
socket in its own temporary directory, and is stopped (``pg_ctl stop -m fast``) whatever happens.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from superinfer.tuner.arms import load_arms

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    cands = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return cands[-1] if cands else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin; "
                    "`make test` installs Debian's postgresql package")
    pytest.importorskip("psycopg", reason="psycopg (the test extra) drives Optuna's PostgreSQL storage")
    run_as: list[str] = []
    owner = None
    if os.geteuid() == 0:
        user = "postgres" if _user_exists("postgres") else "nobody"
        owner = pwd.getpwnam(user)
        run_as = ["runuser", "-u", user, "--"]
    base = tempfile.mkdtemp(prefix="superinfer-pg-")
    os.chmod(base, 0o755)
    data, sock = os.path.join(base, "data"), os.path.join(base, "sock")
    os.mkdir(sock)
    if owner is not None:
        for p in (base, sock):
            os.chown(p, owner.pw_uid, owner.pw_gid)
    port = _free_port()
    log = os.path.join(base, "server.log")
    subprocess.run(run_as + [initdb, "-D", data, "-A", "trust", "-U", "superinfer", "--no-sync", "-E", "UTF8"],
                   check=True, capture_output=True, timeout=120)
    opts = f"-h 127.0.0.1 -p {port} -k {sock} -c fsync=off -c full_page_writes=off"
    started = subprocess.run(run_as + [pg_ctl, "-D", data, "-l", log, "-o", opts, "-w", "-t", "60", "start"],
                             capture_output=True, text=True, timeout=90)
    try:
        if started.returncode != 0:
            raise AssertionError(f"PostgreSQL did not start: {started.stderr}\n{Path(log).read_text()[-2000:]}")
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={port} user=superinfer dbname=postgres", autocommit=True) as c:
            c.execute("CREATE DATABASE optuna")
        yield f"postgresql://superinfer@127.0.0.1:{port}/optuna"
    finally:
        subprocess.run(run_as + [pg_ctl, "-D", data, "-m", "fast", "-w", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def test_two_workers_share_one_study_in_postgresql(postgres: str, tmp_path: Path) -> None:
    out = tmp_path / "arms.json"
    r = subprocess.run([sys.executable, "-m", "superinfer.cli", "tune", "--profile", "chat", "--scenario", "stationary",
                        "--duration", "15", "--trials", "4", "--jobs", "2", "--storage", postgres,
                        "--study", "fleet", "--json", str(out)],
                       capture_output=True, text=True, cwd=REPO, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    arms = load_arms(out)
    assert arms.source["trials"] == 4 and arms.source["storage"] == postgres
    import optuna

    from superinfer.tuner.offline.study import open_storage

    study = optuna.load_study(study_name="fleet", storage=open_storage(postgres))
    assert len(study.trials) == 4  # both workers wrote into the one study on the server
    assert {t.state.name for t in study.trials} == {"COMPLETE"}
