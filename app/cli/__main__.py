"""``python -m app.cli``: the command line without the installed launcher."""

import sys

from app.cli.dispatch import main

if __name__ == "__main__":
    sys.exit(main())
