"""Everything tailcut knows about third-party instrumentation conventions, in one package.

OpenTelemetry GenAI (old and new), OpenInference and OpenLLMetry each name and shape the same facts their
own way. Ingest, the collector, replay and the UI all read those facts, so the knowledge lives here once
and each of them imports it:

* :mod:`.names`: the attribute names of the conventions (tailcut's own are in :mod:`tailcut.attributes`);
* :mod:`.mapping`: how a span of any convention maps onto tailcut's kinds and columns;
* :mod:`.messages`: third-party request and response payloads rebuilt into one message shape;
* :mod:`.corpus`: what a replay corpus takes from the spans of each convention;
* :mod:`.matching`: what a replay compares of a crossing another convention recorded;
* :mod:`.readable`: payloads of every provider's shape laid out for reading (the UI).
"""
