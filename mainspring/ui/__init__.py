"""``mainspring ui``: a local web view of the runs in a store, served by the command.

The runs with filters; one run's plan as a graph coloured by step state, its durations,
errors and tracebacks, agent tasks with their inner steps, questions, workers, memory and a
timeline of its durable history, updated live over server-sent events; and the controls the
command has (pause, cancel, resume, answer, stop a task), through the same runtime calls.

Why Starlette and hypercorn: both are written on anyio, so the view serves on asyncio and on
trio alike, inside the caller's event loop (uvicorn serves asyncio only). They are the
``ui`` extra: ``pip install 'mainspring[ui]'``.

Safety: bound to 127.0.0.1 unless told otherwise; every request needs the random token the
command prints (once in the URL, then a cookie of this origin only); ids are checked before
any query (X1); request bodies are bounded; everything sent is redacted (E5), and the page
renders stored text as text, never as markup, under ``Content-Security-Policy: default-src
'self'``. Nothing is loaded from outside the package.
"""

from ._app import make_app as make_app
from ._server import RemoteRefused as RemoteRefused
from ._server import UiServer as UiServer
from ._server import is_loopback as is_loopback
from ._server import serve as serve

__all__ = ["RemoteRefused", "UiServer", "is_loopback", "make_app", "serve"]
