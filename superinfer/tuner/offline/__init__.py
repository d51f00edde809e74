"""Offline tools around the tuner that drive the twin: scenarios, setting evaluation, the Optuna study
(``superinferd tune``) and the replay loop the benchmark uses."""
