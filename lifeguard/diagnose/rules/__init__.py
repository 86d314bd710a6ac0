"""One module per finding rule; diagnose() runs them all (see RULES in lifeguard.diagnose)."""
