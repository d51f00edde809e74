"""ServeGen production traffic as a workload (``servegen:DIR``, issue 27): what the reader accepts and refuses,
how arrivals and lengths follow each client's windows, and the synthetic ``reasoning`` fit to that data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from superinfer.sim.workload import WorkloadError, load_workload
from superinfer.sim.workload.lengths import LENGTHS
from superinfer.sim.workload.servegen import gaps, parse_pmf, read_servegen, split_spec, total_rate

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "servegen" / "deepseek-r1"


def write_client(d: Path, i: int, windows: list[str], datasets: dict[str, dict[str, str]]) -> None:
    """One client in ServeGen's layout: trace lines as written, dataset PMFs as Python-literal strings."""
    d.mkdir(parents=True, exist_ok=True)
    (d / f"chunk-{i}-trace.csv").write_text("\n".join(windows) + "\n")
    (d / f"chunk-{i}-dataset.json").write_text(json.dumps(datasets))


def two_clients(d: Path) -> Path:
    """Client 0: Poisson-like Gamma (shape 1) at 2 req/s for an hour, prompts 100/200, outputs 1000 then
    (from 1200 s) 2000. Client 1: bursty Weibull (shape 0.3) at 1 req/s in the first window only."""
    write_client(d, 0, [f"{t},2.0,1.0,Gamma,1.0,99" for t in range(0, 3600, 600)],
                 {"0": {"input_tokens": "{100: 0.5, 200: 0.5}", "output_tokens": "{1000: 1.0}"},
                  "1200": {"input_tokens": "{100: 1.0}", "output_tokens": "{2000: 1.0}"}})
    write_client(d, 1, ["0,1.0,3.0,Weibull,0.3,5", "600,0,0,,0,0"],
                 {"0": {"input_tokens": "{7: 1.0}", "output_tokens": "{9: 1.0}"}})
    return d


def test_lengths_come_from_the_latest_dataset_window_at_or_before(tmp_path: Path) -> None:
    w = load_workload(f"servegen:{two_clients(tmp_path)}@0", duration_s=3600.0, seed=3)
    early = w.arrival_s < 600
    late = w.arrival_s >= 1200
    assert set(w.prompt_tokens[early]) <= {100, 200, 7} and set(w.output_tokens[early]) <= {1000, 9}
    assert set(w.output_tokens[late]) == {2000} and set(w.prompt_tokens[late]) == {100}
    assert not np.any((w.output_tokens == 9) & (w.arrival_s >= 600))  # client 1 is silent after its window


def test_the_total_rate_is_rescaled_and_the_span_is_shifted_to_zero(tmp_path: Path) -> None:
    d = two_clients(tmp_path)
    clients = read_servegen(d)
    assert total_rate(clients, 600.0, 1200.0) == pytest.approx(2.0)
    w = load_workload(f"servegen:{d}", rps=6.0, duration_s=1200.0, seed=0, start_s=600.0)
    assert w.arrival_s.min() >= 0 and w.arrival_s.max() < 1200
    n = len(w.arrival_s)  # Poisson (shape 1): mean 7,200, sd 85
    assert abs(n - 7200) < 5 * math.sqrt(7200), n
    assert any("x3" in note for note in w.notes)


def test_the_default_start_is_the_busiest_window(tmp_path: Path) -> None:
    w = load_workload(f"servegen:{two_clients(tmp_path)}", duration_s=600.0, seed=1)
    assert w.notes[0] == "start_s 0: the busiest window" and np.any(w.output_tokens == 9)


def test_spec_and_arrival_errors(tmp_path: Path) -> None:
    assert split_spec("servegen:/a/b@43200") == ("/a/b", 43200.0)
    assert split_spec("servegen:/a/b@home") == ("/a/b@home", None)
    d = two_clients(tmp_path)
    with pytest.raises(WorkloadError, match="brings its own arrivals"):
        load_workload(f"servegen:{d}", arrival="gamma:0.5", duration_s=60.0)
    with pytest.raises(WorkloadError, match="no traffic"):
        load_workload(f"servegen:{d}@7200", duration_s=600.0)


@pytest.mark.parametrize("trace, dataset, says", [
    ("0,2.0,1.0,Gamma,1.0", None, r"chunk-0-trace\.csv:1: expected 6 fields"),
    ("0,x,1.0,Gamma,1.0,1", None, r"chunk-0-trace\.csv:1: .*must be numbers"),
    ("0,2.0,1.0,Pareto,1.0,1", None, r"chunk-0-trace\.csv:1: .*pattern in \('Gamma', 'Weibull'\)"),
    ("0,2.0,1.0,Gamma,1.0,1", {"0": {"input_tokens": "__import__('os').system('true')", "output_tokens": "{1: 1}"}},
     r"window 0: input_tokens: not a Python-literal dict"),
    ("0,2.0,1.0,Gamma,1.0,1", {"0": {"input_tokens": "{5: -0.1}", "output_tokens": "{1: 1}"}},
     r"window 0: input_tokens: probability of 5 is -0.1"),
    ("0,2.0,1.0,Gamma,1.0,1", {"0": {"input_tokens": "{0.5: 1.0}", "output_tokens": "{1: 1}"}},
     r"window 0: input_tokens: token count 0.5"),
    ("0,2.0,1.0,Gamma,1.0,1", {"zero": {"input_tokens": "{1: 1}", "output_tokens": "{1: 1}"}},
     r"window zero: the window key must be a start time"),
])
def test_bad_files_name_file_line_or_window(tmp_path: Path, trace: str, dataset: dict | None, says: str) -> None:
    write_client(tmp_path, 0, [trace], dataset or {"0": {"input_tokens": "{1: 1}", "output_tokens": "{1: 1}"}})
    with pytest.raises(WorkloadError, match=says):
        read_servegen(tmp_path)


def test_a_directory_without_clients_or_datasets(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="holds no chunk-<i>-trace.csv"):
        read_servegen(tmp_path)
    (tmp_path / "chunk-3-trace.csv").write_text("0,0,0,,0,0\n")
    with pytest.raises(WorkloadError, match="has no chunk-3-dataset.json beside it"):
        read_servegen(tmp_path)


@given(st.text(max_size=200))
def test_any_pmf_text_is_parsed_or_refused_with_a_workload_error(text: str) -> None:
    try:
        pmf = parse_pmf(text, "f: window 0: x")
    except WorkloadError:
        return
    assert pmf is None or (pmf.values.min() >= 1 and abs(pmf.probs.sum() - 1) < 1e-9)


@settings(max_examples=40, deadline=None)
@given(pattern=st.sampled_from(["Gamma", "Weibull"]), shape=st.floats(0.005, 5.0), rate=st.floats(0.01, 100.0))
def test_gaps_are_finite_positive_for_any_fitted_shape(pattern: str, shape: float, rate: float) -> None:
    g = gaps(np.random.default_rng(0), pattern, shape, rate, 1000)
    assert np.all(np.isfinite(g)) and np.all(g >= 0)


@pytest.mark.parametrize("pattern, shape", [("Gamma", 0.25), ("Gamma", 1.0), ("Weibull", 0.7), ("Weibull", 2.0)])
def test_gaps_have_the_windows_mean_and_the_fitted_shape(pattern: str, shape: float) -> None:
    g = gaps(np.random.default_rng(1), pattern, shape, 4.0, 400_000)
    assert g.mean() == pytest.approx(0.25, rel=0.03)
    if pattern == "Gamma":  # cv of a Gamma is 1/sqrt(shape)
        assert g.std() / g.mean() == pytest.approx(1 / math.sqrt(shape), rel=0.05)


def test_reasoning_lengths_match_the_cited_servegen_figures() -> None:
    prompt, output = LENGTHS["reasoning"].sample(np.random.default_rng(0), 400_000)
    assert np.median(prompt) == pytest.approx(134, rel=0.03) and np.median(output) == pytest.approx(974, rel=0.03)
    assert output.mean() == pytest.approx(1520, rel=0.03)


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/servegen is not beside this checkout")
def test_the_shipped_deepseek_r1_clients() -> None:
    clients = read_servegen(SHARED)
    assert len(clients) == 48
    w = load_workload(f"servegen:{SHARED}", rps=3.0, duration_s=600.0, seed=0)
    assert 600 < len(w.arrival_s) < 6000  # bursty clients: the count varies, the order of magnitude does not
    assert np.median(w.output_tokens) > 300 and w.output_tokens.max() > 4000  # long reasoning outputs


def test_start_s_is_one_option_for_every_command_that_replays(tmp_path: Path) -> None:
    """``--start-s S`` turns ``servegen:DIR`` into ``servegen:DIR@S`` in ``bench sim``, ``bench vllm`` and
    ``tune``; with any other workload it is a usage error (exit 2) before anything is built or run."""
    from click.testing import CliRunner

    from superinfer.cli import main
    from superinfer.sim.options import with_start

    d = two_clients(tmp_path / "sg")
    assert with_start(f"servegen:{d}", 600.0) == f"servegen:{d}@600" and with_start("chat", None) == "chat"

    def sim(*workload: str) -> dict:
        out = tmp_path / "sim.json"
        r = CliRunner().invoke(main, ["bench", "sim", *workload, "--rps", "1", "--duration", "30", "--policies",
                                      "vllm", "--seeds", "1", "--json", str(out)])
        assert r.exit_code == 0, r.output
        run = json.loads(out.read_text())["runs"][0]
        return {k: run[k] for k in ("arrived", "iterations", "makespan_s")}

    at_1200 = sim("--workload", f"servegen:{d}", "--start-s", "1200")
    assert at_1200 == sim("--workload", f"servegen:{d}@1200")
    assert at_1200 != sim("--workload", f"servegen:{d}"), "the busiest window (0 s) is other traffic"
    model = tmp_path / "never-built"
    for args in (["bench", "sim"], ["bench", "vllm", "--build-tiny", str(model)], ["tune", "--rps", "1", "--json", "-"]):
        r = CliRunner().invoke(main, [*args, "--workload", "chat", "--start-s", "5"])
        assert r.exit_code == 2 and "only a servegen:DIR workload has a start in the day" in r.output, (args, r.output)
    assert not model.exists()
