"""OTLP's protobuf wire format and its JSON form, read and written by hand where the runtime costs too much.

Every part of tailcut that touches encoded OTLP (the collector's receivers, buffer and writer, ingest, the
column decoder behind the Parquet writer) uses these modules, so each rule of the format lives once:

* :mod:`.varint`: base-128 varints, the one reader and the one writer;
* :mod:`.values`: ``AnyValue`` in both forms, encoded bytes to a scalar and protobuf messages to Python;
* :mod:`.encode`: requests and attribute fields assembled from spans that are already bytes;
* :mod:`.columns`: every span of a request decoded at once into Arrow columns (numpy);
* :mod:`.otlp_json`: OTLP/JSON into the protobuf request, the one JSON reader.

Internal to tailcut: the modules import only the protobuf runtime and (:mod:`.columns`) numpy and pyarrow.
"""
