"""``python -m vortonpy``: see :mod:`vortonpy.cli`."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
