"""The HTTP API (FastAPI; OpenAPI 3.1 at ``/openapi.json``, docs at ``/docs``): a door
onto the use cases. One router per resource (``_definitions``, ``_history``,
``_outbox``, ``_tick``, ``_health``), shared dependencies in ``_deps``, bodies in
``_models``, the one error mapping in ``_problems``, the factory in ``_app``.

Imports the use cases and the runtime's front door only (import-linter).
"""

from ._app import create_app as create_app
from ._deps import Services as Services

__all__ = ["Services", "create_app"]
