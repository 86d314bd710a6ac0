"""The documented limitations that turn a failed probe into ``documented``: lifeguard's list and the user's.

The file (limitations.json beside this module; ``--limitations FILE`` adds the user's, in the same format) is
``{"limitations": [{"package", "versions", "probe", "link", "why"}, ...]}``: ``versions`` a PEP 440 specifier
("" for every version), ``probe`` a mode or an fnmatch pattern (``fork*``). Every entry needs a link to the
package's own document or issue that says so: a limitation nobody documented is a candidate bug.
packaging (PEP 440 versions) is imported when a survey reads them: `lifeguard run` does not need it.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable
from pathlib import Path

from lifeguard.errors import SurveyError
from lifeguard.model.survey import Limitation
from lifeguard.survey.hooking import canonical

BUNDLED = Path(__file__).with_name("limitations.json")
FIELDS = ("package", "versions", "probe", "link", "why")


def read_limitations(path: Path = BUNDLED) -> list[Limitation]:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SurveyError(f"limitations {path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise SurveyError(f"limitations {path}: not JSON ({exc})") from None
    entries = data.get("limitations") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise SurveyError(f"limitations {path}: expected {{\"limitations\": [...]}}")
    found = []
    for number, entry in enumerate(entries, 1):
        where = f"limitations {path}: entry {number}"
        if not isinstance(entry, dict) or any(not isinstance(entry.get(f), str) for f in FIELDS):
            raise SurveyError(f"{where}: needs the strings {', '.join(FIELDS)}")
        if not entry["link"].startswith(("https://", "http://")):
            raise SurveyError(f"{where}: link must be the address of the document or issue that says so")
        try:
            SpecifierSet(entry["versions"])
        except InvalidSpecifier:
            raise SurveyError(f"{where}: versions {entry['versions']!r} is not a PEP 440 specifier") from None
        found.append(Limitation(*(entry[f] for f in FIELDS)))
    return found


def matching(limitations: Iterable[Limitation], package: str, version: str, probe: str) -> Limitation | None:
    """The first entry that documents ``probe`` failing for ``package`` at ``version``."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    for item in limitations:
        if canonical(item.package) != canonical(package) or not fnmatch.fnmatchcase(probe, item.probe):
            continue
        try:
            if item.versions and Version(version) not in SpecifierSet(item.versions):
                continue
        except InvalidVersion:
            continue  # a version no specifier can place matches only an entry for every version
        return item
    return None
