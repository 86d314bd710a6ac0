import sys

from lifeguard.cli.main import main

sys.exit(main())
