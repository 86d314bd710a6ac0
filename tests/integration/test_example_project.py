"""The example downstream project (examples/leaky_ext), run the way its users run it: plain pytest.

What they must see: the marked test fails on the buggy build, with the native
frame that touched Python after finalization; the same test passes on the fixed
build; the marker's regression test, the fixture and the probe all pass.
"""

from __future__ import annotations

import re
import shutil

import pytest

from lifeguard.capture import gdb_available
from lifeguard.capture.cores import core_setup
from tests.integration.pytester_support import INNER_SESSION_TIMEOUT, ROOT, junit_cases, properties

pytest_plugins = ["pytester", "tests.integration.pytester_support"]

EXAMPLE = ROOT / "examples" / "leaky_ext"
TEST_FILE = "leaky_ext/tests/test_leaky_ext.py"
SAME_TEST = "test_listeners_run_and_the_process_exits_cleanly"


def test_the_bug_fails_its_test_with_the_native_frame_and_the_fix_passes(plugin_env: pytest.Pytester) -> None:
    shutil.copytree(EXAMPLE, plugin_env.path / "leaky_ext")
    result = plugin_env.runpytest_subprocess("leaky_ext", "-rA", "--junitxml=junit.xml",
                                             timeout=INNER_SESSION_TIMEOUT)
    result.assert_outcomes(failed=1, passed=4)
    out = result.stdout.str()
    assert f"FAILED {TEST_FILE}::{SAME_TEST}[buggy]" in out
    assert f"PASSED {TEST_FILE}::{SAME_TEST}[fixed]" in out
    assert f"{SAME_TEST}[buggy]#0: crashed@exit" in out  # the variant once, not [buggy][buggy]

    failure = junit_cases(plugin_env.path / "junit.xml")[f"{SAME_TEST}[buggy]"]
    assert properties(failure)["phase"] == "exit"
    failure_text = failure.find("failure").text or ""  # type: ignore[union-attr]
    if gdb_available() and core_setup().usable:
        # The library destructor that released the callbacks, named with its source line.
        frame = re.compile(r"release_listeners at \S*leaky_ext\.c:\d+")
        assert frame.search(out), out
        assert frame.search(failure_text), failure_text
    assert "finding [static-destructor-after-finalize]" in out
