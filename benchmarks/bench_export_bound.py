"""Benchmark: what bounding export requests by bytes costs the SDK's export thread.

Measures, in the same run and on the same batch of real SDK spans (512 LLM-like spans: 20 attributes, a
2 KB skeleton, two 3 KB pieces), the OTLP protobuf encoding of the batch (what every export pays) and
:func:`tailcut._carriers.export_bounded` sizing and packing it (the addition), and prints the ratio. Also
times splitting one span with a 40 MiB payload in 64 KiB pieces into carriers of the default gRPC bound
against encoding those carriers. Run::

    python benchmarks/bench_export_bound.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from tailcut import attributes as attr
from tailcut._carriers import DEFAULT_GRPC_BOUND, DEFAULT_HTTP_BOUND, carriers, export_bounded

REPEAT = 20


class _Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans):
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _spans(n: int, attributes: Callable[[int], dict]) -> list[ReadableSpan]:
    kept = _Keep()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("bench")
    for i in range(n):
        with tracer.start_as_current_span("chat", attributes=attributes(i)):
            pass
    return kept.spans


def _best(fn: Callable[[], object], repeat: int = REPEAT) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    batch = _spans(
        512,
        lambda i: (
            {f"gen_ai.k{j}": "v" * 50 for j in range(20)}
            | {
                attr.REQUEST: "x" * 2000,
                attr.REQUEST + ".pieces": [f"{i} " + "y" * 3000, f"{i} " + "z" * 3000],
            }
        ),
    )
    encode = _best(lambda: encode_spans(batch).SerializeToString())
    bound = _best(
        lambda: export_bounded(batch, DEFAULT_HTTP_BOUND, lambda s: SpanExportResult.SUCCESS, oversize=print)
    )
    print(f"512 spans: encoding {encode * 1e3:.1f} ms, sizing and packing {bound * 1e3:.1f} ms: ", end="")
    print(f"{bound / encode:.2f}x")

    pieces = [f"{i:08d}" + "p" * (64 * 1024 - 8) for i in range(640)]
    (big,) = _spans(1, lambda i: {attr.RESPONSE + ".pieces": pieces})
    split = _best(lambda: sum(1 for _ in carriers(big, DEFAULT_GRPC_BOUND)), 3)
    cut = list(carriers(big, DEFAULT_GRPC_BOUND))
    encode_big = _best(lambda: [encode_spans([c]).SerializeToString() for c in cut], 3)
    print(
        f"40 MiB span: {len(cut)} carriers in {split * 1e3:.1f} ms, encoding them {encode_big * 1e3:.1f} ms: "
        f"{split / encode_big:.2f}x"
    )


if __name__ == "__main__":
    main()
