"""MarkupSafe: escape text and an object with an __html__ callback."""

from typing import Any

MODULES = ("markupsafe",)


class _Html:
    def __html__(self) -> str:
        return "<b>ok</b>"


def hook(module: Any) -> list[Any]:
    return [module.escape("<a href='x'>&</a>"), module.escape(_Html()), module.Markup("<i>%s</i>") % "<x>"]
