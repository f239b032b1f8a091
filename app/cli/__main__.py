"""``python -m app.cli``: the command line without the installed launcher."""

import gc
import sys

# The collector is off during the imports, as the installed launcher has it (app/cli/launcher.py).
gc.disable()

from app.cli.dispatch import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
