"""The child protocol is declared once (lifeguard.child.protocol): both sides use its names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from lifeguard.child import protocol
from lifeguard.interpreter import Interpreter
from lifeguard.model.run import RunKind, RunSpec
from lifeguard.run.launch import child_env, child_spec

PACKAGE = Path(protocol.__file__).resolve().parents[1]


def spec_for_test(tmp: Path) -> RunSpec:
    interpreter = Interpreter(executable="/usr/bin/python3", version=(3, 11, 7), include="/usr/include/python3.11",
                              ext_suffix=".cpython-311-x86_64-linux-gnu.so", soabi="cpython-311-x86_64-linux-gnu",
                              libdir="/usr/lib", ldlibrary="libpython3.11.so")
    return RunSpec(scenario="s", variant="buggy", index=0, kind=RunKind.FUNCTION, path="s.py", function="f", code=None,
                   interpreter=interpreter, timeout=5.0, run_dir=tmp, expected="passed")


# The run spec's keys and types are protocol.ChildSpec, a TypedDict: mypy --strict (tests/integration/test_lint.py)
# checks the dict child_spec builds and every read of it in the child (bootstrap.run, plain.prepare,
# forked_test.become_run).


def test_the_run_spec_is_a_literal_the_child_reads_back(tmp_path: Path) -> None:
    sent = child_spec(spec_for_test(tmp_path))
    assert ast.literal_eval(repr(sent)) == sent  # SPEC_ENV carries it as a Python literal


def test_the_environment_names_come_from_the_protocol(tmp_path: Path) -> None:
    env = child_env(spec_for_test(tmp_path), "run-1", events_fd=7)
    assert env == {protocol.CHILD_ENV: "1", protocol.RUN_ID_ENV: "run-1", protocol.VARIANT_ENV: "buggy",
                   protocol.EVENTS_FD_ENV: "7"}


def test_no_protocol_name_is_spelled_outside_the_protocol() -> None:
    """Environment variable names and file names of the boundary appear in protocol.py only."""
    names = [value for key, value in vars(protocol).items()
             if (key.endswith("_ENV") and str(value).startswith("LIFEGUARD_")) or key.endswith("_FILE")
             or key == "BOOT_SCRIPT"]
    assert len(names) >= 12
    assert all(isinstance(name, str) for name in names)
    spelled = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "protocol.py":
            continue
        text = path.read_text()
        for name in names:
            if re.search(rf"[\"']{re.escape(name)}[\"']", text):
                spelled.append(f"{path.relative_to(PACKAGE)}: {name}")
        if re.search(r"faulthandler-\{pid\}\.txt", text):
            spelled.append(f"{path.relative_to(PACKAGE)}: faulthandler file name")
    assert not spelled


def _typed_dict_fields(name: str) -> tuple[str, ...]:
    """The fields of a TypedDict protocol.py declares for mypy only (under TYPE_CHECKING), in order."""
    tree = ast.parse(Path(protocol.__file__).read_text())
    (found,) = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef) and node.name == name]
    return tuple(item.target.id for item in found.body
                 if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name))


def test_the_attach_spec_and_discovery_request_types_are_their_key_lists(tmp_path: Path) -> None:
    """AttachSpec and DiscoveryRequest type both sides of their boundary (mypy); the key lists the code checks
    at run time name the same fields, in the same order."""
    assert _typed_dict_fields("AttachSpec") == protocol.ATTACH_KEYS
    assert _typed_dict_fields("DiscoveryRequest") == protocol.DISCOVERY_REQUEST_KEYS
    from lifeguard.run.launch import attach_spec

    attach = attach_spec(spec_for_test(tmp_path))
    assert tuple(attach) == protocol.ATTACH_KEYS and ast.literal_eval(repr(attach)) == attach
