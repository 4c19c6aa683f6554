"""Where the data is: parsing a data dir or corpus path into a local directory or an ``s3://`` prefix."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailcut.errors import TailcutError
from tailcut.exporters._errors import DataDirError
from tailcut.exporters._location import is_remote, location

SEGMENT = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.=", min_size=1, max_size=12).filter(
    lambda s: s not in (".", "..")
)


@given(st.lists(SEGMENT, min_size=1, max_size=4), st.booleans())
def test_an_s3_url_names_its_bucket_and_prefix(parts, trailing_slash):
    url = "s3://" + "/".join(parts) + ("/" if trailing_slash else "")
    place = location(url)
    assert place.remote and is_remote(url)
    assert place.url == "s3://" + "/".join(parts)
    assert place.path == "/".join(parts)
    assert place.child("spans").url == f"{place.url}/spans"


@given(st.lists(SEGMENT, min_size=1, max_size=4))
def test_a_local_path_is_made_absolute(parts):
    place = location(Path(*parts))
    assert not place.remote
    assert place.url == str(Path(*parts).absolute()) == place.path
    assert location(f"file://{place.url}").url == place.url


@given(st.text(max_size=40))
def test_any_text_is_a_location_or_one_line_error(text):
    if is_remote(text) and not text.lower().startswith("s3://"):
        with pytest.raises(TailcutError, match="unsupported URL scheme") as refused:
            location(text)
        assert "\n" not in str(refused.value)
        return
    try:
        place = location(text)
    except DataDirError as exc:  # an s3:// URL without a bucket
        message = str(exc)
        assert "\n" not in message
    else:
        message = place.url
    assert message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gs://bucket/data", "unsupported URL scheme 'gs'"),
        ("https://example.invalid/data", "unsupported URL scheme 'https'"),
        ("s3://", "needs a bucket"),
        ("s3:///data", "needs a bucket"),
    ],
)
def test_other_urls_are_refused(text, message):
    with pytest.raises(DataDirError, match=message):
        location(text)
