"""A local "download" with pycurl, shared by bug.py and passing.py (a file:// URL: no network)."""

import io
from pathlib import Path

import pycurl


def make_page() -> str:
    """The file:// URL of a small page shipped with the case."""
    return (Path(__file__).resolve().parent / "status.txt").as_uri()


def fetch(curl: pycurl.Curl, url: str) -> str:
    """Perform one transfer of url on curl and return the body."""
    body = io.BytesIO()
    curl.setopt(pycurl.URL, url)
    curl.setopt(pycurl.WRITEDATA, body)
    curl.perform()
    return body.getvalue().decode()
