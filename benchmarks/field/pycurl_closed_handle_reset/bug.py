"""pycurl: reset() on a Curl handle that was closed segfaults inside libcurl.

Upstream: pycurl/pycurl#827 ("Segfault in 3 lines": Curl(); close(); reset(), pycurl 7.45.2);
pycurl 7.46.0 checks the handle and raises pycurl.error("cannot invoke reset() - no curl
handle"). Up to 7.45.6, Curl.close() frees the libcurl easy handle and sets it to NULL, but
do_curl_reset (src/easy.c) does not check it and calls curl_easy_reset(NULL): SIGSEGV in
libcurl's Curl_req_hard_reset, killing the interpreter instead of raising.

Here a client fetches a page, closes its handle in a `finally`, and a later retry path
"recycles" the same object with reset() before reusing it.
"""

import pycurl
from _fetch import fetch, make_page

url = make_page()
curl = pycurl.Curl()
try:
    print(f"{pycurl.version.split()[0]}: first fetch: {fetch(curl, url).strip()}", flush=True)
finally:
    curl.close()  # frees libcurl's easy handle

print("retrying with the same handle: reset() it first", flush=True)
curl.reset()  # curl_easy_reset(NULL) -> SIGSEGV inside libcurl
print(fetch(curl, url))
