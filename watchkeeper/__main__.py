"""``python -m watchkeeper``: the same as the ``watchkeeper`` command."""

from watchkeeper.runtime.doors.cli import main

main()
