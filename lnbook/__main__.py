"""``python -m lnbook``: see :mod:`lnbook.book.cli`."""

import sys

from lnbook.book.cli import main

if __name__ == "__main__":
    sys.exit(main())
