"""The command line: ``lifeguard.cli.main.main(argv) -> int``, entered through ``lifeguard.cli.entry``.

Imports nothing: the entry point starts a wrapped command before the command line's modules load
(lifeguard.run.headstart).
"""
