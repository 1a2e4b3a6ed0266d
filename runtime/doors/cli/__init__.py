"""The ``watchkeeper`` command line (typer + rich): a door onto the use cases.

Exit codes: 0 ok; 1 runtime failure; 2 bad input (spec, option, file or setting: the
message names the field and the fix); 3 not found; 4 not authorized; 5 conflict with
the current state; 6 the database is unreachable.
"""

from ._commands import app as app
from ._commands import main as main

__all__ = ["app", "main"]
