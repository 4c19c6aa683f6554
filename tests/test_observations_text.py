"""The failure text in Python (``observations.failure_text``, which the trace signals read) is the
classifier's SQL (``_rules.FAILURE_TEXT``, over the stored columns): random status messages, events and
results, run through real DuckDB over the ``spans`` columns' Arrow types."""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from tailcut.analysis._rules import FAILURE_TEXT
from tailcut.exporters import schema
from tailcut.exporters.conventions import observations

TEXTS = st.sampled_from(
    [
        "",
        "boom",
        "HTTP Error 429: Too Many Requests",
        "Error: weather is not a valid tool, try one of [get_weather].",
        "ok\nline two",
        "é ü 💥",
        "x" * 4100,
        # longer than the start of a string result the failure text decodes (escapes of 2 to 12 characters)
        'Error 💥 é " \\ \n\t ' * 4000,
    ]
)
RESULTS = st.one_of(
    st.none(),
    TEXTS.map(json.dumps),
    st.fixed_dictionaries({"content": TEXTS}).map(json.dumps),
    st.fixed_dictionaries({"data": st.fixed_dictionaries({"content": TEXTS})}).map(json.dumps),
    st.fixed_dictionaries({"raw_output": st.one_of(TEXTS, st.integers())}).map(json.dumps),
    st.builds(
        lambda text: json.dumps(
            {"invalid_tool_calls": [{"error": text, "name": "f"}]}, separators=(",", ":")
        ),
        TEXTS,
    ),
    st.lists(st.integers(), max_size=3).map(json.dumps),
)
EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["exception", "agent.step_recovery", "log"]),
        st.dictionaries(st.sampled_from(["exception.type", "exception.message", "message", "other"]), TEXTS),
    ),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["tool", "retriever", "llm", "chain", "agent"]),
    status_message=st.one_of(st.none(), TEXTS),
    events=EVENTS,
    response=RESULTS,
)
def test_the_python_failure_text_is_the_sql_one(kind, status_message, events, response):
    table = pa.table(
        {
            "kind": pa.array([kind]),
            "status_message": pa.array([status_message], pa.string()),
            "events": pa.array(
                [
                    [
                        {"name": name, "time": None, "attributes": list(attributes.items())}
                        for name, attributes in events
                    ]
                ],
                pa.list_(schema.EVENT),
            ),
            "response": pa.array([response], pa.string()),
        }
    )
    with duckdb.connect() as connection:
        connection.register("arrow_rows", table)
        [(expected,)] = connection.execute(
            f"WITH rows AS (SELECT kind, status_message, events, response::JSON AS response FROM arrow_rows) "
            f"SELECT {FAILURE_TEXT} FROM rows"
        ).fetchall()
    assert observations.failure_text(kind, status_message, events, response) == expected


@settings(max_examples=150, deadline=None)
@given(text=st.text(min_size=1, max_size=40), ascii_only=st.booleans(), after=st.sampled_from(["", " x"]))
def test_a_long_string_result_is_decoded_at_its_start_as_the_whole_decode_reads_it(text, ascii_only, after):
    """A string result past the decoded start (``_STRING_PREFIX``) reads as ``json.loads`` of the whole
    reads it, whatever its escapes and wherever the cut falls; one that ends early takes the whole decode."""
    long = text * (observations._STRING_PREFIX // len(text) + 1)
    response = json.dumps(long, ensure_ascii=ascii_only)
    assert observations._string_start(response) == long[: observations.RESULT_CHARS]  # never decoded whole
    assert observations._result_text("tool", response) == long[: observations.RESULT_CHARS]
    early = json.dumps(text, ensure_ascii=ascii_only) + after + " " * observations._STRING_PREFIX
    whole = observations._result_text("tool", early)
    assert whole == (text[: observations.RESULT_CHARS] if not after else early[: observations.RESULT_CHARS])


def test_a_failed_tool_whose_arguments_are_broken_json_is_a_refusal_and_a_429_text_an_error():
    broken = json.dumps('{"city": "Par')
    assert (
        observations.reported_category("tool", failed=True, text="boom", request=broken) == "schema_violation"
    )
    assert observations.reported_category("tool", failed=False, text="boom", request=broken) is None
    assert observations.reported_category("tool", failed=False, text="HTTP Error 429: slow down") == "error"
    assert observations.reported_category("chain", failed=True, text="all fine") is None
