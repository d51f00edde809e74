"""The online controller's modules depend only on the core (and numpy/Optuna): never on the daemon,
the simulator, torch or vLLM, so the same controller runs in the daemon and in the twin."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "superinfer" / "tuner"
CONTROLLER_MODULES = sorted(p for p in ROOT.glob("*.py"))
FORBIDDEN = ("superinfer.daemon", "superinfer.sim", "superinfer.vllm", "superinfer.duplexkv", "superinfer.tui",
             "superinfer.tuner.offline", "superinfer.bench", "torch", "vllm")


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_controller_modules_import_only_the_core() -> None:
    assert len(CONTROLLER_MODULES) >= 10
    bad = {p.name: sorted(m for m in _imports(p) if m.startswith(FORBIDDEN)) for p in CONTROLLER_MODULES}
    assert not {k: v for k, v in bad.items() if v}, bad
