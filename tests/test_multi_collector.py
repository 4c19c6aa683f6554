"""Several collectors, one data dir: three ``tailcut collect`` instances behind a trace-ID router.

A small router splits every OTLP request by trace id (what the OpenTelemetry Collector's
``loadbalancing`` exporter with ``routing_key: traceID`` does) over three collectors that all write the
same data dir (on local disk, and in a bucket of a real S3 API on loopback); a single collector gets
the same requests whole. 10,000 traces: the three-way data dir has exactly one ``traces`` row per trace,
the same baseline slice and the same deterministic decisions as the single collector, and its
population estimates agree with the single collector's intervals.

The anomaly policy is the one decision that may differ: each instance scores against the running
baseline of the traces routed to it (a uniform third of each stream), so a trace near the threshold can
land on either side. Its π is 1 either way, so the estimates stay unbiased.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tailcut.analysis import Dataset
from tailcut.analysis._estimates import category_rates
from tailcut.collector import Collector, load_config
from tailcut.exporters._location import location
from tests.test_collector_helpers import export_request, post, span, write_config
from tests.test_storage_s3 import s3  # noqa: F401  (the moto S3 server fixture)

TRACES = 10_000
PER_REQUEST = 500
COLLECTORS = 3


def _requests() -> list[bytes]:
    """10,000 small traces (a root and one model call), one in twenty failing, two harness revisions."""
    rng = random.Random(14)
    bodies, spans = [], []
    for index in range(TRACES):
        trace_id = rng.randbytes(16)
        root = trace_id[:8]
        failed = rng.random() < 0.05
        revision = "v2" if index % 2 else "v1"
        tokens = rng.randint(50, 150)
        spans.append(
            span(
                trace_id,
                b"\x01" + root[1:],
                root,
                name="chat",
                tailcut__kind="llm",
                gen_ai__usage__input_tokens=tokens,
                gen_ai__usage__output_tokens=10,
            )
        )
        spans.append(span(trace_id, root, name="run", error=failed, tailcut__kind="root",
                          tailcut__harness__revision=revision))  # fmt: skip
        if len(spans) == 2 * PER_REQUEST:
            bodies.append(export_request(spans))
            spans = []
    return bodies


def route(body: bytes, instances: int) -> list[bytes]:
    """Split one OTLP request by trace id into one request per instance (empty ones left out)."""
    request = ExportTraceServiceRequest.FromString(body)
    parts = [ExportTraceServiceRequest() for _ in range(instances)]
    for resource_spans in request.resource_spans:
        targets: dict[int, object] = {}
        for scope_spans in resource_spans.scope_spans:
            for item in scope_spans.spans:
                owner = int.from_bytes(hashlib.sha256(item.trace_id).digest()[:8], "big") % instances
                if owner not in targets:
                    copy = parts[owner].resource_spans.add()
                    copy.resource.CopyFrom(resource_spans.resource)
                    scope = copy.scope_spans.add()
                    scope.scope.CopyFrom(scope_spans.scope)
                    targets[owner] = scope
                targets[owner].spans.append(item)  # type: ignore[attr-defined]
    return [part.SerializeToString() for part in parts if part.resource_spans]


def _run(directory: Path, data: Path | str, count: int, bodies: list[bytes]) -> None:
    collectors = []
    for index in range(count):
        home = directory / f"collector-{index}"
        home.mkdir(parents=True)
        config = load_config(write_config(home), overrides={"data": str(data)})
        collectors.append(Collector(config))
    ports = [collector.start().http for collector in collectors]
    try:
        for body in bodies:
            for part in route(body, count) if count > 1 else [body]:
                owner = _owner(part, count) if count > 1 else 0
                assert post(ports[owner], part)[0] == 200
    finally:
        for collector in collectors:
            collector.stop()


def _owner(part: bytes, instances: int) -> int:
    first = ExportTraceServiceRequest.FromString(part).resource_spans[0].scope_spans[0].spans[0]
    return int.from_bytes(hashlib.sha256(first.trace_id).digest()[:8], "big") % instances


@pytest.fixture(scope="module")
def bodies() -> list[bytes]:
    return _requests()


@pytest.fixture(scope="module")
def single(tmp_path_factory, bodies) -> Path:
    root = tmp_path_factory.mktemp("single")
    _run(root, root / "data", 1, bodies)
    return root / "data"


@pytest.fixture(scope="module", params=["local", "s3"])
def data_dirs(request, tmp_path_factory, bodies, single) -> tuple[Path, Path | str]:
    """The single collector's data dir, and the one three collectors shared (local disk, or a bucket)."""
    root = tmp_path_factory.mktemp("three")
    shared = root / "data" if request.param == "local" else f"{request.getfixturevalue('s3')}/shared"
    _run(root, shared, COLLECTORS, bodies)
    return single, shared


def _decisions(data: Path | str) -> dict[str, tuple[bool, bool, float, tuple[str, ...]]]:
    with Dataset(data) as dataset:
        rows = dataset.sql(
            "SELECT trace_id, kept, baseline, inclusion_probability, "
            "list_sort(list_filter(policies, lambda p: p != 'anomalies')) AS policies FROM traces"
        ).rows()
    return {
        trace_id: (kept, baseline, pi, tuple(policies)) for trace_id, kept, baseline, pi, policies in rows
    }


@pytest.mark.slow
def test_three_collectors_write_one_consistent_data_dir(data_dirs):
    single, shared = data_dirs
    with Dataset(shared) as dataset:
        rows, distinct = dataset.sql("SELECT count(*), count(DISTINCT trace_id) FROM traces").row(0)
        assert rows == distinct == TRACES  # exactly one row per trace overall
        kept_spans, spans = dataset.sql(
            "SELECT (SELECT 2 * count(*) FROM traces WHERE kept), (SELECT count(*) FROM spans)"
        ).row(0)
        assert kept_spans == spans
    files = location(shared).files("traces")
    assert len(files) >= COLLECTORS  # every instance published its own files, none overwrote another's
    assert all(Path(f).name.startswith("part-") for f in files)
    one, three = _decisions(single), _decisions(shared)
    assert one.keys() == three.keys()
    assert {t for t, d in one.items() if d[1]} == {t for t, d in three.items() if d[1]}  # the same slice
    differing = [t for t in one if one[t][3] != three[t][3] or one[t][1] != three[t][1]]
    assert differing == []  # every decision but the anomaly policy's is the same


@pytest.mark.slow
def test_the_population_estimates_agree_within_their_intervals(data_dirs):
    single, shared = data_dirs
    with Dataset(single) as one, Dataset(shared) as three:
        first, second = category_rates(one), category_rates(three)
    for a, b in zip(first, second, strict=True):
        assert a.weighted is not None and b.weighted is not None
        assert a.weighted.low <= b.weighted.value <= a.weighted.high, a.category
        assert b.weighted.low <= a.weighted.value <= b.weighted.high, a.category
    (error,) = (rate for rate in second if rate.category == "error")
    assert 0.03 < error.weighted.value < 0.07  # one in twenty runs failed
