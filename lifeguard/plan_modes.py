"""The ways a run can start (kept apart so the CLI can list them without importing the planner)."""

MODES = ("auto", "fresh", "fork-server")
