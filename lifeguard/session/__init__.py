"""What every front end shares: a session's set-up and exit code, the evidence hooks, the survey's pipeline.

``lifeguard run``/``probe``/``survey`` (cli/) and ``pytest --lifeguard`` (pytest_plugin/) parse their own
arguments and print their own words; everything between those and the engine lives here once.
"""
