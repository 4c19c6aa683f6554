"""``tailcut ui``: a local, read-only trace viewer in the browser.

A :class:`Viewer` opens a data dir (and optionally replay results files and corpora); :func:`create_app`
serves it as a Starlette app: the traces table, each trace's span tree on a timeline with its decision and
findings, each span's request and response rendered for reading, the verdict table of ``tailcut compare``
and the replays' rates and divergences. Templates and static assets ship in the package; nothing is
fetched at run time.

Examples
--------
::

    import uvicorn
    from tailcut.ui import Viewer, create_app

    viewer = Viewer("data", results=["replay-cut-v2.parquet"])
    uvicorn.run(create_app(viewer), host="127.0.0.1", port=8765)
"""

from tailcut.ui._app import create_app
from tailcut.ui._errors import BadRequest, NotFound, UiError
from tailcut.ui._viewer import Viewer

__all__ = ["BadRequest", "NotFound", "UiError", "Viewer", "create_app"]
