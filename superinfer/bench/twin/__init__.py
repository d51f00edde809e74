"""`superinferd bench sim` and `superinferd bench figures`: the twin's policy comparison (grids of runs, report, plots)."""
