"""contrib/grafana/superinfer.json evaluated by a real Prometheus (Debian's ``prometheus``, started and stopped
here on loopback) scraping a running sim daemon: every query of every panel and template variable parses and
evaluates, and the panels an operator reads first have data. Grafana's own variables are given the values
Grafana would (``$instance`` = all, ``$__rate_interval`` = four scrape intervals)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest

from superinfer.daemon.backends.vllm_child import free_port
from tests.daemon.conftest import DaemonProc, start_daemon
from tests.tui.test_grafana import DASHBOARD, queries

pytestmark = pytest.mark.timeout(240)

SCRAPE_S = 1
#: panels whose queries must return data from a twin under load (the rest may be empty there: the tuner's
#: trials, rejections, a probe skipped by a fixed B_xfer)
MUST_HAVE_DATA = ("Backend", "Uptime", "Queues", "KV blocks used / capacity", "Scheduler parameters", "Iterations",
                  "Transfer budget B_xfer", "Params version", "Twin lag")


def grafana_to_promql(expr: str) -> str:
    return (expr.replace('=~"$instance"', '=~".*"').replace("$__rate_interval", f"{4 * SCRAPE_S}s")
            .replace("$instance", ".*"))


@pytest.fixture(scope="module")
def loaded_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProc]:
    """A sim daemon replaying bursty traffic under KV pressure (the ``demo`` profile)."""
    tmp = tmp_path_factory.mktemp("grafana-daemon")
    d = start_daemon(tmp, "--profile", "demo", "--set", "sim.rps=2.0", profile_text=None, timeout=90)
    yield d
    assert d.terminate() == 0, d.output()[-3000:]


@pytest.fixture(scope="module")
def prometheus(loaded_daemon: DaemonProc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus binary (Debian's prometheus package; make test installs it)")
    tmp = tmp_path_factory.mktemp("prometheus")
    target = loaded_daemon.url.removeprefix("http://")
    (tmp / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {SCRAPE_S}s\n  evaluation_interval: {SCRAPE_S}s\n"
        f"scrape_configs:\n  - job_name: superinferd\n    static_configs:\n      - targets: ['{target}']\n")
    port = free_port()
    log = open(tmp / "prometheus.log", "w")
    proc = subprocess.Popen([binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # up, and 20 scrapes of the daemon stored
            if proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {(tmp / 'prometheus.log').read_text()[-2000:]}")
            try:
                r = httpx.get(url + "/api/v1/query", params={"query": "count_over_time(up[1m])"}, timeout=5)
                res = r.json()["data"]["result"] if r.status_code == 200 else []
                if res and float(res[0]["value"][1]) >= 20:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("prometheus did not scrape the daemon 20 times in 60 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def test_every_dashboard_query_evaluates_on_a_real_prometheus(loaded_daemon: DaemonProc, prometheus: str) -> None:
    for _ in range(6):  # finished requests: the attainment panels have data
        loaded_daemon.post("/v1/completions", json={"prompt": "hello", "max_tokens": 4})
    time.sleep(4 * SCRAPE_S)
    dash = json.loads(DASHBOARD.read_text())
    exprs = queries(dash)
    assert len(exprs) > 40
    by_title = {t["expr"]: p["title"] for p in dash["panels"] for t in p.get("targets", [])}
    empty = []
    for expr in exprs:
        promql = grafana_to_promql(expr)
        if promql.startswith("label_values("):  # a Grafana function: the series behind it must exist
            promql = promql.removeprefix("label_values(").rsplit(",", 1)[0]
        r = httpx.get(prometheus + "/api/v1/query", params={"query": promql}, timeout=10)
        assert r.status_code == 200 and r.json()["status"] == "success", (expr, r.text[:500])
        if not r.json()["data"]["result"]:
            empty.append(by_title.get(expr, expr))
    must = [t for t in empty if t in MUST_HAVE_DATA]
    assert not must, f"panels with no data from a loaded twin: {must} (all empty: {empty})"
    assert len(empty) < len(exprs) // 2, empty


def test_a_broken_query_would_be_caught(prometheus: str) -> None:
    r = httpx.get(prometheus + "/api/v1/query", params={"query": "sum by (tenant (rate(x[1m]))"}, timeout=10)
    assert r.status_code == 400 and r.json()["status"] == "error"
