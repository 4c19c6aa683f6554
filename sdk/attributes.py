"""Attribute names tailcut writes and reads: the span contract of DESIGN.md section 2.

Standard OpenTelemetry GenAI semantic-convention names (``gen_ai.*``, ``error.type``) are written for
interoperability; what the standard lacks lives under ``tailcut.*``. Every component imports names from
here, never spells them inline, so the contract has one source.
"""

from __future__ import annotations

from typing import Final, Protocol

# --- span kinds --------------------------------------------------------------------------------------
KIND: Final = "tailcut.kind"
KINDS: Final = (
    "root",
    "agent",
    "llm",
    "tool",
    "retriever",
    "embedding",
    "memory",
    "router",
    "chain",
    "other",
)
#: Kinds whose spans are boundary crossings: each records its request and response in full.
BOUNDARY_KINDS: Final = frozenset({"llm", "tool", "retriever", "embedding", "memory", "router"})

#: ``gen_ai.operation.name`` written for each kind (standard values where the convention has one).
OPERATION_FOR_KIND: Final = {
    "root": "invoke_workflow",
    "agent": "invoke_agent",
    "llm": "chat",
    "tool": "execute_tool",
    "retriever": "retrieval",
    "embedding": "embeddings",
    "memory": "memory",
    "router": "route",
    "chain": "chain",
    "other": "other",
}

# --- every boundary span -------------------------------------------------------------------------------
BOUNDARY: Final = "tailcut.boundary"
OCCURRENCE: Final = "tailcut.occurrence"
SEQ: Final = "tailcut.seq"
REQUEST: Final = "tailcut.request"
REQUEST_SHA256: Final = "tailcut.request.sha256"
#: Payload sizes in bytes, written when the text is not inline (capture off, or offloaded).
REQUEST_BYTES: Final = "tailcut.request.bytes"
RESPONSE: Final = "tailcut.response"
RESPONSE_SHA256: Final = "tailcut.response.sha256"
RESPONSE_BYTES: Final = "tailcut.response.bytes"
ATTEMPT: Final = "tailcut.attempt"
#: Retries the harness made before this attempt; absent on a first attempt (means 0).
RETRIES: Final = "tailcut.retries"
#: True when a payload exceeded the inline limit; the inline value is then a JSON stub (see payloads).
PAYLOAD_TRUNCATED: Final = "tailcut.payload.truncated"
#: The payload-store references (``sha256:<hex>``) of every offloaded payload of the span.
PAYLOAD_REF: Final = "tailcut.payload.ref"
#: True when ``tailcut.request`` / ``tailcut.response`` is a skeleton whose placeholders name pieces of
#: the trace; ``<payload attribute>.pieces`` carries the pieces no earlier span of the trace carried
#: (see ``tailcut._pieces``).
REQUEST_PIECED: Final = "tailcut.request.pieced"
RESPONSE_PIECED: Final = "tailcut.response.pieced"
#: Carrier spans: when a span is too big for one export request, its pieces travel in children of it named
#: ``tailcut.pieces`` and marked ``tailcut.carrier`` (see ``tailcut._carriers``). Readers store their pieces
#: and nothing else: a carrier is never a ``spans`` row and never counts in a trace's signals.
CARRIER_SPAN_NAME: Final = "tailcut.pieces"
CARRIER: Final = "tailcut.carrier"
#: The kind the signals see for a carrier (not one of :data:`KINDS`: no row is ever stored with it).
CARRIER_KIND: Final = "carrier"
#: A carrier's pieces too big for one export request, each as ``<sha256 of the piece><its text>``, where
#: the text is the concatenation of the placeholders of its chunks (carried as ordinary pieces).
CARRIER_CHUNKED: Final = "tailcut.carrier.chunked"
#: Set when an offloaded payload could not be stored (store full, unwritable): the span says so.
PAYLOAD_ERROR: Final = "tailcut.payload.error"
#: False when content capture was switched off for this kind: request/response hold only hashes and sizes.
CONTENT_CAPTURED: Final = "tailcut.content.captured"
#: Streams: the boundary returned a stream; the events as received (JSON array) and how the stream ended.
STREAM: Final = "tailcut.stream"
STREAM_EVENTS: Final = "tailcut.stream.events"
STREAM_END: Final = "tailcut.stream.end"  # "exhausted", "closed", "error"
#: Failures recorded for replay: the exception's message (``error.type`` holds its class).
ERROR_MESSAGE: Final = "tailcut.error.message"
#: Set when a replay session served this crossing from the record instead of running it.
REPLAYED: Final = "tailcut.replayed"

# --- llm spans ------------------------------------------------------------------------------------------
PROMPT_VERSION: Final = "tailcut.prompt.version"
TOOLS_SHA256: Final = "tailcut.tools.sha256"
#: Number of tool calls in this response whose arguments fail the JSON Schema sent in the same request.
SCHEMA_VIOLATIONS: Final = "tailcut.schema_violations"

# --- tool spans ----------------------------------------------------------------------------------------
TOOL_SCHEMA_SHA256: Final = "tailcut.tool.schema.sha256"
#: The JSON Schema the tool itself enforces (canonical JSON), when the decorator was given one.
TOOL_SCHEMA: Final = "tailcut.tool.schema"

# --- the root span (the run) ----------------------------------------------------------------------------
HARNESS_REVISION: Final = "tailcut.harness.revision"
ENV_REVISION: Final = "tailcut.env.revision"
INITIAL_STATE: Final = "tailcut.initial_state"
RUN_INPUT: Final = "tailcut.run.input"
RUN_OUTPUT: Final = "tailcut.run.output"
OUTCOME: Final = "tailcut.outcome"
OUTCOME_SCORE: Final = "tailcut.outcome.score"
OUTCOMES: Final = ("pass", "fail", "unknown")

# trace signals (computed by the SDK for its own process, recomputed by the collector for the whole trace)
TRACE_LLM_CALLS: Final = "tailcut.trace.llm_calls"
TRACE_TOOL_CALLS: Final = "tailcut.trace.tool_calls"
TRACE_ERRORS: Final = "tailcut.trace.errors"
TRACE_TOTAL_TOKENS: Final = "tailcut.trace.total_tokens"
TRACE_MAX_TOOL_REPEAT: Final = "tailcut.trace.max_tool_repeat"
TRACE_SCHEMA_VIOLATIONS: Final = "tailcut.trace.schema_violations"
TRACE_DEPTH: Final = "tailcut.trace.depth"
TRACE_SPAN_COUNT: Final = "tailcut.trace.span_count"
TRACE_ANOMALY_SCORE: Final = "tailcut.trace.anomaly_score"


class TraceSignalCounts(Protocol):
    """What carries a trace's signals: the SDK's per-run counts, the exporters' per-trace ones."""

    llm_calls: int
    tool_calls: int
    errors: int
    max_tool_repeat: int
    schema_violations: int
    depth: int
    span_count: int

    @property
    def total_tokens(self) -> int: ...


def trace_signal_attributes(signals: TraceSignalCounts) -> dict[str, int]:
    """The trace signals under their root-span attribute names (the SDK and the exporters both write them)."""
    return {
        TRACE_LLM_CALLS: signals.llm_calls,
        TRACE_TOOL_CALLS: signals.tool_calls,
        TRACE_ERRORS: signals.errors,
        TRACE_TOTAL_TOKENS: signals.total_tokens,
        TRACE_MAX_TOOL_REPEAT: signals.max_tool_repeat,
        TRACE_SCHEMA_VIOLATIONS: signals.schema_violations,
        TRACE_DEPTH: signals.depth,
        TRACE_SPAN_COUNT: signals.span_count,
    }


# sampling decision, written by the collector on kept spans
SAMPLING_POLICIES: Final = "tailcut.sampling.policies"
SAMPLING_PROBABILITY: Final = "tailcut.sampling.probability"
SAMPLING_BASELINE: Final = "tailcut.sampling.baseline"

# --- failure analysis (DESIGN.md section 5) ---------------------------------------------------------------
#: The failure categories a trace can show, in the order reports list them.
FAILURE_CATEGORIES: Final = (
    "error",
    "schema_violation",
    "schema_drift",
    "tool_loop",
    "cost_blowup",
    "silent_degradation",
)
#: The harness layers a finding can point to.
HARNESS_LAYERS: Final = ("prompt", "tool_schema", "workflow", "memory", "model", "environment")

# --- OpenTelemetry GenAI semantic conventions (current names) ---------------------------------------------
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_SYSTEM: Final = "gen_ai.system"  # the pre-1.37 name of gen_ai.provider.name, read only
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_REQUEST_TEMPERATURE: Final = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P: Final = "gen_ai.request.top_p"
GEN_AI_REQUEST_TOP_K: Final = "gen_ai.request.top_k"
GEN_AI_REQUEST_MAX_TOKENS: Final = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_SEED: Final = "gen_ai.request.seed"
GEN_AI_REQUEST_STOP_SEQUENCES: Final = "gen_ai.request.stop_sequences"
GEN_AI_REQUEST_FREQUENCY_PENALTY: Final = "gen_ai.request.frequency_penalty"
GEN_AI_REQUEST_PRESENCE_PENALTY: Final = "gen_ai.request.presence_penalty"
GEN_AI_REQUEST_CHOICE_COUNT: Final = "gen_ai.request.choice.count"
GEN_AI_REQUEST_STREAM: Final = "gen_ai.request.stream"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
GEN_AI_TOOL_DESCRIPTION: Final = "gen_ai.tool.description"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_DATA_SOURCE_ID: Final = "gen_ai.data_source.id"
GEN_AI_EMBEDDINGS_DIMENSION_COUNT: Final = "gen_ai.embeddings.dimension.count"
ERROR_TYPE: Final = "error.type"

# --- resource ------------------------------------------------------------------------------------------
SERVICE_NAME: Final = "service.name"
