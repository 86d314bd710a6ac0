"""Which of a distribution's extension modules the survey probes: at most a few, the ones programs import.

A wheel may hold dozens of extension modules (numpy ~20, scipy ~100), most of them private parts of a
package. Each extension module is seen through its public face: its name up to its first private part
(``msgpack._cmsgpack`` -> ``msgpack``, ``numpy._core._multiarray_umath`` -> ``numpy``); importing the face
loads it, as a program would. A top-level private module (``_cffi_backend``) is its own face. Test modules
(a ``tests``/``test``/``testing`` part, or one starting with ``test_``) are never probed. The faces are
ranked shallowest first, then those that are extension modules themselves, then by how many extension
modules each one loads; the first MAX_TARGETS are probed. A hook may name the modules to probe instead.
Every module not probed is listed with why.
"""

from __future__ import annotations

from collections.abc import Sequence

from lifeguard.model.survey import Skipped

MAX_TARGETS = 3  # modules probed per distribution: each costs a run per probe mode
TEST_PARTS = frozenset({"tests", "test", "testing", "_tests", "_test", "conftest"})


def is_test_module(name: str) -> bool:
    return any(part in TEST_PARTS or part.startswith("test_") for part in name.split("."))


def public_face(name: str) -> str:
    """The shallowest importable name that loads ``name``: its parts up to the first private one."""
    parts = name.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_"):
            return ".".join(parts[:max(index, 1)])
    return name


def choose_targets(extensions: Sequence[str], named: Sequence[str] = (),
                   limit: int = MAX_TARGETS) -> tuple[tuple[str, ...], tuple[Skipped, ...]]:
    """The modules to probe and the extension modules skipped (with why); ``named``: a hook's own choice."""
    skipped: list[Skipped] = []
    if named:
        chosen = tuple(dict.fromkeys(named))
        for module in extensions:
            if module not in chosen:
                skipped.append(Skipped(module, _loaded_by(module, chosen) or "the hook names the modules to probe: "
                                       + ", ".join(chosen)))
        return chosen, tuple(skipped)
    faces: dict[str, list[str]] = {}
    for module in extensions:
        if is_test_module(module):
            skipped.append(Skipped(module, "a test module"))
            continue
        faces.setdefault(public_face(module), []).append(module)
    ranked = sorted(faces, key=lambda face: (face.count("."), face not in extensions, -len(faces[face]), face))
    chosen = tuple(ranked[:limit])
    for face in ranked:
        for module in faces[face]:
            if module in chosen:
                continue
            if face in chosen:
                skipped.append(Skipped(module, f"private: loaded by importing {face}, which is probed"))
            else:
                skipped.append(Skipped(module, f"over the limit of {limit} modules probed per package "
                                               f"(its package {face} ranks lower)"))
    return chosen, tuple(skipped)


def _loaded_by(module: str, chosen: Sequence[str]) -> str:
    for face in chosen:
        if module.startswith(face + ".") and public_face(module) == face:
            return f"private: loaded by importing {face}, which is probed"
    return ""
