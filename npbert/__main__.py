"""`python -m npbert`: the npbert command."""

import sys

from npbert.cli import main

sys.exit(main())
