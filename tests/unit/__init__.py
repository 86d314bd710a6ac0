"""Pure logic on constructed or captured data: no process is started (tests/unit/conftest.py enforces it)."""
