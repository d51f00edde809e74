"""Snapshots: the dashboard's screen, as text, for recorded daemon states at 120×40 and 80×24.

``fixtures/demo.jsonl.gz`` is a ``superinferd top --record`` of a real daemon on the ``demo`` profile
(re-record: ``python -m tests.tui.record_fixture``). Each scene replays its first N polls through the app
(no timing involved: every frame is derived from the recorded times) and compares the screen with
``snapshots/<scene>_<W>x<H>.txt``. After an intended change of the layout, regenerate them with

    SUPERINFER_UPDATE_SNAPSHOTS=1 .venv/bin/pytest -q tests/tui/test_snapshots.py

and review the diff (``git diff tests/tui/snapshots``) as you would review code.
"""

from __future__ import annotations

import asyncio
import difflib
import os
import time
from pathlib import Path

import pytest

from superinfer.tui.app import TopApp
from superinfer.tui.source import ReplaySource
from tests.tui.conftest import screen_text

HERE = Path(__file__).parent
FIXTURE = HERE / "fixtures" / "demo.jsonl.gz"
SNAPSHOTS = HERE / "snapshots"


def scene_length(scene: str, lines: list[dict]) -> int:
    """Polls replayed for ``scene``, found in the recording: ``steady`` ends 6 polls after the param
    change, ``disconnected`` at the last failed poll, ``restarted`` is all of it."""
    if scene == "steady":
        return next(i for i, r in enumerate(lines) if (r.get("state") or {}).get("params", {}).get("version") == 2) + 6
    if scene == "disconnected":
        return max(i for i, r in enumerate(lines) if "error" in r) + 1
    return len(lines)

CASES = [("steady", (120, 40)), ("steady", (80, 24)), ("disconnected", (120, 40)), ("restarted", (80, 24))]

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def utc():
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = old
    time.tzset()


def render(scene: str, size: tuple[int, int]) -> str:
    async def go() -> str:
        source = ReplaySource(FIXTURE)
        app = TopApp(source, url="replay:demo", read_only_reason="replay of a recording", autopoll=False)
        async with app.run_test(size=size) as pilot:
            n = scene_length(scene, source.lines)
            for _ in range(n):
                app.apply(await source.poll())
            await pilot.pause()
            app.render_all()  # panel sizes are known now
            await pilot.pause()
            return screen_text(app)

    return asyncio.run(go())


@pytest.mark.parametrize("scene,size", CASES, ids=[f"{s}-{w}x{h}" for s, (w, h) in CASES])
def test_screen_matches_the_snapshot(scene: str, size: tuple[int, int], utc: None) -> None:
    text = render(scene, size) + "\n"
    path = SNAPSHOTS / f"{scene}_{size[0]}x{size[1]}.txt"
    if os.environ.get("SUPERINFER_UPDATE_SNAPSHOTS"):
        path.write_text(text)
    if not path.exists():
        pytest.fail(f"no snapshot {path}; create it with SUPERINFER_UPDATE_SNAPSHOTS=1")
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(path), "screen"))
        pytest.fail(f"the screen differs from {path.name} (SUPERINFER_UPDATE_SNAPSHOTS=1 regenerates):\n{diff}")
    lines = text.splitlines()
    assert len(lines) == size[1] and max(len(line) for line in lines) <= size[0]


def test_the_scenes_show_what_they_are_named_for(utc: None) -> None:
    """Independent of the stored files: the facts each scene must show."""
    steady = render("steady", (120, 40))
    assert "SIMULATION" in steady and "REPLAY" in steady
    assert all(t in steady for t in ("chat", "voice", "bulk"))
    assert "BREACH" in steady and "OK" in steady
    assert "params v1 → v2 by api:127.0.0.1: α" in steady or "params v1 → v2 by api:127.0.0.1: alpha 3 → 4" in steady
    assert "KV rotations in" in steady and "voice: — → BREACH" in steady
    gone = render("disconnected", (120, 40))
    assert "DISCONNECTED" in gone and "daemon not running (no runtime.json)" in gone and "status ok → draining" in gone
    back = render("restarted", (80, 24))
    assert "DISCONNECTED" not in back and "daemon restarted" in render("restarted", (120, 40))
