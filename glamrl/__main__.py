"""`python -m glamrl ...` (and `torchrun -m glamrl train ...`): the glamrl command line."""

import sys

from glamrl.cli import main

sys.exit(main())
