"""``python -m setattn.cli`` (and ``torchrun ... -m setattn.cli``) runs the command."""

import sys

from setattn.cli import main

sys.exit(main())
