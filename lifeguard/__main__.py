import sys

from lifeguard.cli import main

sys.exit(main())
