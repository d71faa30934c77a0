"""``python -m setattn.cli`` (and ``torchrun ... -m setattn.cli``) runs the command."""

from setattn.cli import entry

entry()
