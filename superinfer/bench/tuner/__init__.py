"""`superinferd bench tuner`: the online tuner against static settings and a per-phase oracle, on the twin."""
