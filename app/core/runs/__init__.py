"""Jobs once they exist: the live feed, the run history, saved runs, metric series, the jobs
view, rollouts and comparisons."""
