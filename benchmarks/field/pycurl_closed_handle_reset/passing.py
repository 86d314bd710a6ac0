"""The same two fetches as bug.py, with the handle reset and reused before it is closed.

What pycurl's maintainers answer in pycurl/pycurl#827: a Curl object must not be used after
close(); reset() it to reuse it while it is open, and close it once, when done (or make a new
Curl for the retry).
"""

import pycurl
from _fetch import fetch, make_page

url = make_page()
curl = pycurl.Curl()
try:
    print(f"{pycurl.version.split()[0]}: first fetch: {fetch(curl, url).strip()}", flush=True)
    curl.reset()  # the handle is still open: reset() clears its options for reuse
    print(f"retry on the reset handle: {fetch(curl, url).strip()}", flush=True)
finally:
    curl.close()
