"""``python -m loopir``: the command line (see [`loopir.cli`][loopir.cli])."""

from __future__ import annotations

import sys

from loopir.cli import main

if __name__ == "__main__":
    sys.exit(main())
