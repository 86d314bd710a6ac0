import sys

from lifeguard.cli.entry import main

sys.exit(main())
