"""The tail-sampling collector: keep every failed and anomalous trace plus a uniform baseline, and say why.

It receives OTLP over HTTP and gRPC, buffers each trace's spans until its root span has ended (plus a
grace), computes the trace signals and an anomaly score, evaluates the ``tail_sampling`` policies of
``otel-config.yaml`` (the OpenTelemetry Collector's keys and semantics) and writes one ``traces`` row
for every trace, kept or dropped, with every policy that matched and the probability the trace had
of being kept, plus the kept traces' spans, to Parquet (DESIGN.md section 3).

Examples
--------
::

    from tailcut.collector import Collector, load_config

    config = load_config("otel-config.yaml", {"data": "data", "grpc": False})
    with Collector(config) as collector:
        print(collector.ports.http)  # agents export to http://127.0.0.1:<port>/v1/traces
        ...
        collector.wait_idle()
"""

from tailcut.collector._collector import Collector, Ports
from tailcut.collector._config import CollectorConfig, load_config
from tailcut.collector._decide import TraceDecision
from tailcut.collector._errors import CollectorError

__all__ = ["Collector", "CollectorConfig", "CollectorError", "Ports", "TraceDecision", "load_config"]
