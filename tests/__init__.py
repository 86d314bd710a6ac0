"""lifeguard's tests: tests/unit/ (pure logic) and tests/integration/ (real processes)."""
