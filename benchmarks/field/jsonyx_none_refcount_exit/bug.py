"""jsonyx 2.2.0's C scanner steals a reference to None per parse: the crash comes at exit.

Upstream: nineteendo/jsonyx#36 ("Fatal Python error: none_dealloc", jsonyx 2.2.0 C
extension; fixed in 2.2.1). Every jsonyx.loads() with the _jsonyx C scanner drops one
reference to None that it never took. On CPython before 3.12 None is an ordinary
refcounted object, so the count only drifts down; nothing fails while enough references
remain. Here the program parses messages until about 1000 references to None are left,
and exits: finalization (the final gc of finalize_modules, clearing types' and modules'
dicts, functions' defaults) releases more than that, None's count reaches 0 and
none_dealloc ends the process: "Fatal Python error: none_dealloc: deallocating None: bug
likely caused by a refcount error in a C extension / Python runtime state: finalizing",
SIGABRT on the main thread, at exit. A program that parsed more would crash during its run.
"""

import sys

import jsonyx
from _parse import MARGIN, parse_until_margin

parsed = parse_until_margin()
left = sys.getrefcount(None)
if left > MARGIN:
    raise RuntimeError(f"jsonyx {jsonyx.__version__} stole no references to None")
print(f"parsed {parsed} messages; {left} references to None left; exiting")
