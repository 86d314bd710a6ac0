"""The child's half of a group of tests (lifeguard.pytest_plugin.groups): in the child forked for the group, each
test's whole protocol runs as plain pytest runs it, and its reports, the reports it logs itself (subtests) and
the warnings it raises go to the group's log instead of to this copy of pytest's terminal, counters and plugins
(a pytest-xdist worker's channel among them): the pytest process logs them from there.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from lifeguard.child import unpatched
from lifeguard.pytest_plugin.suite_probes import MadeByTest, apply_probe, passed
from lifeguard.pytest_plugin.verdicts import report_entry
from lifeguard.pytest_plugin.worker_log import log_line


def group_body(items: list[pytest.Item], log_fd: int, probe: str | None = None) -> Callable[[], int]:
    """What a group's child runs: each test's protocol, its reports written to the log, never to this copy of
    pytest's terminal, counters and plugins (a pytest-xdist worker's channel among them). ``probe``: a test-suite
    probe (lifeguard.pytest_plugin.suite_probes) applied after each test that passed."""

    def body() -> int:
        from _pytest.runner import runtestprotocol
        from _pytest.warnings import catch_warnings_for_item

        config, session = items[0].config, items[0].session
        warned = config.pluginmanager.has_plugin("warnings")  # pytest's warnings plugin (-p no:warnings: off)
        _divert(config, log_fd)
        _forget_inherited_finalizers(session)
        made = None
        if probe is not None:
            made = MadeByTest()
            config.pluginmanager.register(made, "lifeguard-suite-probe")
        out, err = os.dup(1), os.dup(2)  # the run's relays: pytest's capture sets 1 and 2 back to the terminal
        try:
            for at, item in enumerate(items):
                log_line(log_fd, {"start": item.nodeid, "location": list(item.location), "at": time.monotonic()})
                nextitem = items[at + 1] if at + 1 < len(items) else None
                spawned = made.spawned if made is not None else 0
                with catch_warnings_for_item(config=config, ihook=item.ihook, when="runtest", item=item) \
                        if warned else contextlib.nullcontext():
                    reports = runtestprotocol(item, log=True, nextitem=nextitem)  # each logged as made (_divert)
                if made is not None and probe is not None:
                    if passed(reports):
                        code = apply_probe(probe, item, made, spawned, log_fd, (out, err))
                        if code is not None:  # the probe's forked child, or a probe that failed the test
                            return code
                    made.take()
                log_line(log_fd, {"finish": item.nodeid, "at": time.monotonic()})
                if session.shouldfail or session.shouldstop:  # -x, --maxfail: torn down already, as pytest does
                    break
        finally:  # what the exit writes (a fatal error, faulthandler's dump) is the run's evidence
            os.dup2(out, 1)
            os.dup2(err, 2)
            unpatched.close(out)
            unpatched.close(err)
        return 0

    return body


# The plugins that see a report in a group's child too: pytest's session (it counts failures for -x and
# --maxfail) and its subtests (a test with a failed subtest fails); every other one sees it in pytest's process.
CHILD_REPORT_PLUGINS = frozenset({"session", "subtests"})


def _divert(config: pytest.Config, log_fd: int) -> None:
    """In the child: the reports of each phase as it ends, those a test logs itself (subtests) and the warnings
    caught go to the log, and no further than CHILD_REPORT_PLUGINS."""
    hooks: Any = config.pluginmanager.hook
    manager = config.pluginmanager
    logreport = hooks.pytest_runtest_logreport
    dispatch = logreport._hookexec

    def reports(name: str, impls: list[Any], kwargs: dict[str, Any], firstresult: bool) -> object:
        kept = [impl for impl in impls if manager.get_name(impl.plugin) in CHILD_REPORT_PLUGINS]
        if kept:
            dispatch(name, kept, kwargs, firstresult)
        entry = report_entry(config, kwargs["report"])
        if entry is not None:
            log_line(log_fd, entry)
        return []

    def caught(name: str, impls: object, kwargs: dict[str, Any], firstresult: bool) -> object:
        message = kwargs["warning_message"]
        log_line(log_fd, {"warning": {"message": str(message.message), "category": message.category.__name__,
                                      "filename": message.filename, "lineno": message.lineno,
                                      "nodeid": kwargs.get("nodeid", "")}})
        return []

    logreport._hookexec = reports  # pluggy's dispatch of these hooks, in this child only
    hooks.pytest_warning_recorded._hookexec = caught


def _forget_inherited_finalizers(session: pytest.Session) -> None:
    """In the child: what this process's pytest set up before the fork (a test it ran itself: a marked one) is
    torn down there, not in every group's child too. The finalizers the child's own setups add run in it."""
    stack = getattr(getattr(session, "_setupstate", None), "stack", None)
    if isinstance(stack, dict):
        for node, (finalizers, exc) in list(stack.items()):
            if isinstance(finalizers, list):
                stack[node] = ([], exc)
