"""What the daemon's ``vllm`` backend takes from the plugin's published stats (``plugin_view``): the VLT
ranking only while the document is fresh, as the queues."""

from __future__ import annotations

from superinfer.daemon.backends.vllm_child import QUEUES_STALE_S, plugin_view


def test_the_daemon_shows_the_plugins_ranking_only_while_fresh() -> None:
    rows = [{"req_id": "cmpl-1", "tenant": "chat", "phase": "waiting", "vlt_s": 1.5, "age_s": 6.0}]
    published = {"scheduler": {}, "ranking": rows + ["junk"], "published_at": 1000.0}
    assert plugin_view(published, now=1000.5)["ranking"] == rows
    assert "ranking" not in plugin_view(published, now=1000.0 + QUEUES_STALE_S + 1)
    assert "ranking" not in plugin_view({"scheduler": {}, "published_at": 1000.0}, now=1000.5)
