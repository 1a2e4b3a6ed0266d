"""The history page: a server-rendered door for a person, at ``/`` on
``watchkeeper serve`` (mounted by the API's app factory).

==================================== ===============================================
path                                 shows
==================================== ===============================================
``/``                                the definitions the viewer may see: status, the
                                     last outcome beside the next due time, the
                                     plain-words summary, the next occurrences with
                                     their DST notes (keyset-paged)
``/definitions/{id}``                one definition: revisions, next occurrences, and
                                     its history as a timeline of the six facts per
                                     occurrence with the recommended next step
``/definitions/{id}/polls``          a condition's poll timeline
``/tasks/{task_id}``                 one task: its six facts, the report's headline and
                                     every tool call, the report (markdown rendered
                                     without HTML), receipt and deliveries
``/definitions/{id}/{action}``       POST, the owner's decisions (``_actions``): confirm
                                     or reject a proposal; pause, resume, cancel, run now
``/sign-in``, ``/sign-out``          the session (a user token or an operator key)
==================================== ===============================================

A viewer signs in by pasting a user token or an operator key (the API's own
credentials, checked by ``usecases.authenticate_bearer`` on every request, so a
revoked key or a replaced token signs the viewer out at once); an agent key, an app
key and the tick secret are refused. The credential is kept in an ``HttpOnly``,
``SameSite=Strict`` cookie (``Secure`` over https). The API never reads that cookie:
it authenticates ``Authorization: Bearer`` only, so the cookie cannot be used against
it from another site. The POST forms are CSRF-protected by ``SameSite=Strict`` and by
refusing a request whose ``Origin`` (or, without one, ``Referer``) is not this page's
own origin; the action forms also carry a token derived from the session.

Modules: the session (``_session``), the views (``_views``), the owner's decisions
(``_actions``), rendering, the security
headers and the one error-to-page mapping (``_render``) — its cursors are the use
cases' own, as in the API and MCP; Jinja2 templates in ``templates/`` (autoescaped) and the style sheet in
``static/``. Imports the use cases and the runtime's front door only.
"""

from fastapi import APIRouter

from . import _actions, _session, _views

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
"""Every route of the page; the API's app factory includes it."""
router.include_router(_session.router)
router.include_router(_views.router)
router.include_router(_actions.router)
