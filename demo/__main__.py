"""python -m baton.demo runs the demo, like baton demo."""

import sys

from baton.demo.run import main

sys.exit(main())
