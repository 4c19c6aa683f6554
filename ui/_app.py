"""The Starlette app: routes, templates and error pages over a :class:`~tailcut.ui._viewer.Viewer`.

Routes (all ``GET``, the app is read-only):

=====================================================  ===================================================
``/``                                                  the traces table (filters and sorting in the query)
``/traces/{trace_id}``                                 one trace: tree, waterfall, decision, findings
``/traces/{trace_id}/spans/{span_id}``                 one span's detail, as an HTML fragment
``/api/traces/{trace_id}/spans/{span_id}/{part}``      a whole request or response, as JSON
``/compare?by=COLUMN&a=A&b=B``                         the verdict table of ``tailcut compare --by``
``/replays``                                           every ``--results`` file: rates and divergences
``/replays/{name}/incidents/{trace_id}``               one incident of a validation: new vs baseline,
                                                       the cut, and the golden slice
``/static/...``                                        the CSS and JavaScript shipped in the package
=====================================================  ===================================================
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

import jinja2
from markupsafe import escape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from tailcut.exporters.conventions.readable import offending_arguments
from tailcut.ui import _traces
from tailcut.ui._auth import TokenMiddleware
from tailcut.ui._errors import BadRequest, NotFound
from tailcut.ui._svg import axis_scale, interval_svg
from tailcut.ui._viewer import Viewer


def _number(value: Any) -> str:
    return "-" if value is None else f"{value:,}"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f} ms" if value >= 10 else f"{value:.2f} ms"


def _usd(value: float | None) -> str:
    """Dollars to three significant digits, never in exponent form: model calls cost fractions of a cent,
    and ``0.0001`` on every row tells no two runs apart.

    >>> _usd(0.000123456), _usd(0.0451), _usd(12.3456), _usd(0.0), _usd(None)
    ('0.000123', '0.0451', '12.35', '0', '-')
    """
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if abs(value) >= 1:
        return f"{value:,.2f}"
    return f"{value:.{2 - math.floor(math.log10(abs(value)))}f}"


def _when(value: dt.datetime | None) -> str:
    """UTC to the second, joined by a no-break space so a narrow column never wraps a timestamp."""
    return "-" if value is None else value.astimezone(dt.UTC).strftime("%Y-%m-%d\u00a0%H:%M:%S")


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tailcut.ui", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(number=_number, ms=_ms, when=_when, usd=_usd)
    env.globals.update(interval_svg=interval_svg, offending_arguments=offending_arguments)
    return Jinja2Templates(env=env)


def create_app(
    viewer: Viewer, *, token: str | None = None, allowed_hosts: Sequence[str] | None = None
) -> Starlette:
    """The web app over ``viewer``; every request needs ``token`` when one is given.

    ``allowed_hosts`` limits the ``Host`` header a request may carry (``tailcut ui`` on loopback without a
    token allows only loopback names, so a web page cannot reach the viewer by rebinding a domain name).

    Examples
    --------
    ::

        import uvicorn
        from tailcut.ui import Viewer, create_app

        uvicorn.run(create_app(Viewer("data", results=["replay.parquet"])), host="127.0.0.1", port=8765)
    """
    templates = _templates()

    def page(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("facets", viewer.facets)
        context.setdefault("has_replays", bool(viewer.results))
        return templates.TemplateResponse(request, name, context, status_code=status)

    def traces(request: Request) -> Response:
        query = _traces.TraceQuery.from_params(request.query_params)
        return page(request, "traces.html", result=viewer.traces_page(query), query=query)

    def trace(request: Request) -> Response:
        trace_id = request.path_params["trace_id"].lower()
        view = viewer.trace(trace_id)
        selected = request.query_params.get("span")
        detail = _span_context(trace_id, selected) if selected and view.spans else None
        return page(
            request,
            "trace.html",
            view=view,
            detail=detail,
            replays=viewer.replays_of(trace_id),
            corpus_run=viewer.corpus_runs.get(trace_id),
        )

    def _span_context(trace_id: str, span_id: str) -> dict[str, Any]:
        span, payloads, findings = viewer.span(trace_id, span_id)
        return {"trace_id": trace_id, "span": span, "payloads": payloads, "findings": findings}

    def span(request: Request) -> Response:
        context = _span_context(
            request.path_params["trace_id"].lower(), request.path_params["span_id"].lower()
        )
        return page(request, "_span.html", detail=context)

    def payload(request: Request) -> Response:
        trace_id, span_id = request.path_params["trace_id"].lower(), request.path_params["span_id"].lower()
        loaded = viewer.payload(trace_id, span_id, request.path_params["part"])
        findings = viewer.span_findings(trace_id, span_id)
        fragment = templates.get_template("_payload.html").render(payload=loaded, findings=findings)
        return JSONResponse(
            {"part": loaded.part, "chars": loaded.chars, "raw": loaded.text, "html": fragment}
        )

    def compare(request: Request) -> Response:
        params = request.query_params
        column, first, second = params.get("by", "harness_revision"), params.get("a"), params.get("b")
        choices = viewer.facets.harness_revisions
        if not (first and second):
            if column != "harness_revision" or len(choices) < 2:
                return page(
                    request, "compare.html", comparison=None, column=column, a=first or "", b=second or ""
                )
            first, second = choices[0], choices[1]
        comparison = viewer.compare(column, first, second)
        bounds = [
            b
            for row in comparison.categories
            for d in (row.verdict.census, row.verdict.population, row.verdict.baseline, row.verdict.tail)
            if d is not None
            for b in (d.low, d.high)
        ]
        return page(
            request,
            "compare.html",
            comparison=comparison,
            column=column,
            a=first,
            b=second,
            scale=axis_scale(bounds),
        )

    def replays(request: Request) -> Response:
        return page(request, "replays.html", results=viewer.results, viewer=viewer)

    def incident(request: Request) -> Response:
        file, found = viewer.incident(request.path_params["name"], request.path_params["trace_id"].lower())
        return page(request, "incident.html", file=file, incident=found, viewer=viewer)

    async def not_found(request: Request, exc: Exception) -> Response:
        message = str(exc.detail) if isinstance(exc, HTTPException) else str(exc)
        return page(request, "404.html", status=404, message=message, path=request.url.path)

    async def bad_request(request: Request, exc: Exception) -> Response:
        return page(request, "400.html", status=400, message=str(exc))

    async def server_error(request: Request, exc: Exception) -> Response:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return page(request, "400.html", status=500, message=f"{type(exc).__name__}: {first_line}")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            return await not_found(request, exc)
        return HTMLResponse(f"<p>{exc.status_code}: {escape(exc.detail)}</p>", exc.status_code)

    routes = [
        Route("/", traces),
        Route("/traces/{trace_id}", trace),
        Route("/traces/{trace_id}/spans/{span_id}", span),
        Route("/api/traces/{trace_id}/spans/{span_id}/{part}", payload),
        Route("/compare", compare),
        Route("/replays", replays),
        Route("/replays/{name}/incidents/{trace_id}", incident),
        Mount("/static", StaticFiles(packages=[("tailcut.ui", "static")]), name="static"),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={
            NotFound: not_found,
            BadRequest: bad_request,
            HTTPException: http_error,
            Exception: server_error,
        },
    )
    if token:
        app.add_middleware(TokenMiddleware, token=token)
    if allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    return app
