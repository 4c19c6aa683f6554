"""``tailcut ui``: a local, read-only trace viewer in the browser.

A :class:`Viewer` opens a data dir (and optionally replay results files and corpora); :func:`create_app`
serves it as a Starlette app: the traces table, each trace's span tree on a timeline with its decision and
findings, each span's request and response rendered for reading, the verdict table of ``tailcut compare``
and the replays' rates and divergences. Templates and static assets ship in the package; nothing is
fetched at run time.

Examples
--------
A data dir of one run (see :class:`tailcut.analysis.Dataset` for how one is made):

>>> import tailcut
>>> from tailcut.exporters import ParquetSpanExporter
>>> from tailcut.testing import capture_spans
>>> with capture_spans() as spans:
...     with tailcut.run("weather", input={"city": "Paris"}):
...         pass
>>> exporter = ParquetSpanExporter("data")
>>> exporter.export(spans).name
'SUCCESS'
>>> exporter.shutdown()

The viewer is a Starlette app: serve it with ``uvicorn.run(create_app(viewer), host="127.0.0.1",
port=8765)`` (what ``tailcut ui --data data`` does), or ask it directly:

>>> from starlette.testclient import TestClient
>>> from tailcut.ui import Viewer, create_app
>>> viewer = Viewer("data")
>>> with TestClient(create_app(viewer)) as client:
...     page = client.get("/")
...     tree = client.get(f"/traces/{spans.trace_id}")
>>> page.status_code, "weather" in page.text, tree.status_code
(200, True, 200)
"""

from tailcut.ui._app import create_app
from tailcut.ui._errors import BadRequest, NotFound, UiError
from tailcut.ui._viewer import Viewer

__all__ = ["BadRequest", "NotFound", "UiError", "Viewer", "create_app"]
