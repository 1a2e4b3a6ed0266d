"""``python -m runtime``: the same as the ``watchkeeper`` command."""

from ._cli import main

main()
