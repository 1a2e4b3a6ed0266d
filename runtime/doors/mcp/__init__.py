"""MCP tools for chat agents (the official ``mcp`` SDK, 2.x): a door onto the use cases.

Tools (``_tools``): ``propose_agreement``, ``preview_schedule``, ``list_agreements``,
``show_agreement``, ``task_history``, ``task_report``, ``condition_timeline``. There is
no tool that confirms, pauses, resumes, cancels or triggers: an agent proposes; the
owner confirms the exact revision by its ``spec_hash`` through the HTTP API or the CLI
(seed 004). Inputs are typed (the ``spec`` parameter's schema is the spec model's);
answers are models (``_models``); a refusal is an error result carrying problem
details — for a spec, every problem with its field and fix (``_results``).

Transports (``_server``):

- stdio: :func:`serve_stdio`, run by ``watchkeeper mcp`` with the agent key from
  ``WATCHKEEPER_AGENT_KEY``;
- streamable HTTP: :func:`http_door`, mounted at ``/mcp`` by the HTTP API's factory
  (``create_app(..., mcp=True)``, as ``watchkeeper serve`` does), whose lifespan runs
  the SDK's session manager.

Authentication (``_auth``): every call acts as an agent key of one tenant; any other
credential is refused (403), another tenant's data is not found. Over HTTP a small ASGI
middleware (:class:`AgentBearer`) authenticates ``Authorization: Bearer <agent key>``
with the use cases, rather than the SDK's ``AuthSettings`` + ``TokenVerifier``: those
model an OAuth resource server and require an authorization server's ``issuer_url``,
which watchkeeper does not have (its keys are opaque, issued by ``watchkeeper keys
create``), and the SDK's bearer backend turns every refusal into the same anonymous
401, where ours says why (unknown, revoked, not an agent key) as problem details. The
middleware sets the SDK's own ``AuthenticatedUser`` on the request, so the SDK's
session manager still binds each session to the key that opened it.

Imports the use cases and the runtime's front door only, never the CLI
(import-linter); the CLI launches this door and the API mounts it.
"""

from ._server import PATH as PATH
from ._server import HttpDoor as HttpDoor
from ._server import build_server as build_server
from ._server import http_door as http_door
from ._server import serve_stdio as serve_stdio

__all__ = ["PATH", "HttpDoor", "build_server", "http_door", "serve_stdio"]
