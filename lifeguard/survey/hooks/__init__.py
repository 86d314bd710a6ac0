"""Hooks for widely used packages: each file is ``def hook(module)`` (optionally ``MODULES = (...)``, the
modules to probe), loaded by path in a probe's child, never imported by lifeguard. A hook depends on the
standard library and its package only (the survey copies it into reproduction scripts), does what a typical
program does in a few lines, and returns what it made. generic.py serves every other package."""
