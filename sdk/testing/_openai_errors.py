"""OpenAI's error body (``{"error": {"message", "type", "param", "code"}}``), shared by Chat and Responses.

Defaults per status follow what the live API sends, so an SDK raises the same typed exception with the
same ``type``/``code`` attributes a harness would see in production.
"""

from __future__ import annotations

from typing import Any

from tailcut.testing._script import ScriptedError

# status -> (message, type, code)
_DEFAULTS: dict[int, tuple[str, str, str | None]] = {
    400: ("Invalid request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You do not have access to this resource.", "invalid_request_error", None),
    404: (
        "The model does not exist or you do not have access to it.",
        "invalid_request_error",
        "model_not_found",
    ),
    409: ("The request conflicts with another request.", "invalid_request_error", None),
    422: ("The request could not be processed.", "invalid_request_error", None),
    429: ("Rate limit reached for requests. Please try again later.", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request. Sorry about that!", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
}


def openai_error_body(error: ScriptedError) -> dict[str, Any]:
    """Return the JSON body OpenAI sends for ``error`` (or ``error.body`` when the script gives one)."""
    if error.body is not None:
        return dict(error.body)
    fallback = ("The server had an error.", "server_error", None) if error.status >= 500 else _DEFAULTS[400]
    message, kind, code = _DEFAULTS.get(error.status, fallback)
    return {
        "error": {
            "message": error.message if error.message is not None else message,
            "type": error.type if error.type is not None else kind,
            "param": None,
            "code": error.code if error.code is not None else code,
        }
    }
