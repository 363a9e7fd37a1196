"""`python -m npbert.cli`, as the tests and the bench run the command: npbert's entry point."""

import sys

from npbert.__main__ import main

sys.exit(main())
