"""Start and watch runs: the one start recipe, supervision, the fork-server, process trees, the engine."""
