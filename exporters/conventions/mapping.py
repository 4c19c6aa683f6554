"""How spans from any instrumentation map onto tailcut's kinds and columns: the one table of the mapping.

Kind resolution
---------------
The first rule that yields a kind wins. Values match case-sensitively, as the conventions spell them.

====  ================================  ====================================================================
rule  attribute (convention)            value -> kind
====  ================================  ====================================================================
1     ``tailcut.kind``                  any tailcut kind, as is
2     ``openinference.span.kind``       LLM->llm, TOOL->tool, CHAIN/PROMPT/GUARDRAIL->chain,
      (OpenInference)                   RETRIEVER/RERANKER->retriever, EMBEDDING->embedding, AGENT->agent,
                                        EVALUATOR->other
3     ``traceloop.span.kind``           workflow/task->chain, agent->agent, tool->tool
      (OpenLLMetry)
4     ``llm.request.type``              chat/completion->llm, embedding->embedding, rerank->retriever
      (OpenLLMetry)
5     ``gen_ai.operation.name``         chat/text_completion/generate_content->llm, embeddings->embedding,
      (GenAI)                           execute_tool->tool, invoke_agent/create_agent->agent,
                                        retrieval->retriever, invoke_workflow/chain->chain, memory->memory,
                                        route->router
6     ``gen_ai.tool.name`` present      tool
7     ``gen_ai.provider.name`` or       llm (GenAI spans before v1.27 carry no operation name)
      ``gen_ai.system`` with a token
      usage key
8     none of the above                 other (every attribute stays in ``attributes``)
====  ================================  ====================================================================

**Nested model calls.** An ``llm`` span whose parent is also an ``llm`` span is the same model call seen by
a second instrumentation (the ``anthropic`` SDK emits its own CLIENT span inside tailcut's ``llm`` span; an
OpenInference LangChain span wraps an OpenAI-instrumentor span). It is stored with kind ``other`` (its
``provider``/``model``/``operation`` columns keep what it said) and the trace signals skip it, so a call
counts once, with the outer span's tokens and errors.

Column fallbacks
----------------
The first source present with the right type fills the column, and that attribute leaves the
``attributes`` map (an attribute whose value a column does not hold whole, or of an unexpected type, stays
there). GenAI names are listed current first, then their older spellings (renamed in v1.27 and v1.37).

==================  ==========================================================================================
column              sources, in order (convention)
==================  ==========================================================================================
``provider``        ``gen_ai.provider.name``, ``gen_ai.system`` (GenAI); ``llm.system``, ``llm.provider`` (OI)
``model``           ``gen_ai.request.model``, ``gen_ai.response.model`` (GenAI); ``llm.request.model_name``,
                    ``llm.model_name``, ``embedding.model_name``, ``reranker.model_name`` (OpenInference)
``operation``       ``gen_ai.operation.name``; else from ``llm.request.type`` (chat, completion->
                    text_completion, embedding->embeddings, rerank); else the kind's standard operation
``input_tokens``    ``gen_ai.usage.input_tokens``, ``gen_ai.usage.prompt_tokens`` (GenAI, OpenLLMetry);
                    ``llm.token_count.prompt`` (OpenInference); ``llm.usage.prompt_tokens`` (old OpenLLMetry)
``output_tokens``   ``gen_ai.usage.output_tokens``, ``gen_ai.usage.completion_tokens``;
                    ``llm.token_count.completion``; ``llm.usage.completion_tokens``
``finish_reason``   first of ``gen_ai.response.finish_reasons``; ``llm.response.finish_reason`` (OpenLLMetry);
                    ``llm.finish_reason`` (OpenInference); else the first output message's finish reason
``tool_name``       ``gen_ai.tool.name``; ``tool.name`` (OI); ``traceloop.entity.name`` (on tool spans)
``tool_call_id``    ``gen_ai.tool.call.id``; ``tool.id``, ``tool_call.id`` (OpenInference)
``agent_name``      ``gen_ai.agent.name``; ``agent.name`` (OI); ``traceloop.entity.name`` (agent spans)
``error_type``      ``error.type``; else ``exception.type`` of the first ``exception`` event
``boundary``        ``tailcut.boundary``; else, for boundary kinds, ``tool:<tool_name>``,
                    ``llm:<provider>.<operation>`` or ``<kind>:<span name>``
``occurrence``,     ``tailcut.occurrence``, ``tailcut.seq``; else numbered per trace in start-time order,
``seq``             after any tailcut numbers of the trace (synthesised boundaries only)
``attempt``         ``tailcut.attempt`` (null otherwise; signals treat null as a first attempt)
``request``         ``tailcut.request`` (verbatim); else rebuilt as canonical JSON (:mod:`.messages`). llm:
                    ``{"model", "system_instructions", "messages", "tools", "parameters"}`` from
                    ``gen_ai.input.messages``, ``gen_ai.system_instructions``, ``gen_ai.tool.definitions``,
                    ``gen_ai.prompt`` (v1.26: attribute or ``gen_ai.content.prompt`` event);
                    ``llm.input_messages.N.message.*``, ``llm.prompts.N.*``, ``llm.tools.N.*``,
                    ``llm.invocation_parameters`` (OpenInference); ``gen_ai.prompt.N.*``,
                    ``llm.request.functions.N.*`` (OpenLLMetry). Tool spans: the parsed arguments from
                    ``gen_ai.tool.call.arguments``, ``tool_call.function.arguments``, ``input.value``,
                    ``traceloop.entity.input``. Other kinds: ``input.value``, ``traceloop.entity.input``
``response``        ``tailcut.response`` (verbatim); else rebuilt. llm spans: ``{"messages"}`` from
                    ``gen_ai.output.messages``, ``gen_ai.completion`` (v1.26), ``llm.output_messages.N.*``,
                    ``llm.choices.N.*``, ``gen_ai.completion.N.*``. Tool spans: ``gen_ai.tool.call.result``,
                    ``output.value``, ``traceloop.entity.output``. Retrievers: ``output.value`` or
                    ``{"documents"}`` from ``retrieval.documents.N.document.*``. Others: ``output.value``,
                    ``traceloop.entity.output``
``request_sha256``  ``tailcut.request.sha256``; else the sha256 of the rebuilt request (``response_sha256``
                    alike)
``service_name``    resource ``service.name``
==================  ==========================================================================================

JSON-valued attributes are parsed where the convention says they hold JSON (``gen_ai.*.messages``,
``gen_ai.tool.call.arguments``/``result``, ``tool_call.function.arguments``, ``llm.invocation_parameters``,
``llm.tools.N.tool.json_schema``, ``traceloop.entity.input``/``output``, and ``input.value``/``output.value``
when their ``*.mime_type`` is ``application/json``); a value that does not parse is kept as a JSON string.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, NamedTuple

from tailcut import attributes as attr
from tailcut.exporters.conventions import names as n

# The preparation-span rule (one model request is one ``llm`` span) lives with the trace signals, which the
# SDK computes without importing this package; re-exported here beside the rest of the kind mapping.
from tailcut.signals import PREPARATION_SPAN_SUFFIXES as PREPARATION_SPAN_SUFFIXES
from tailcut.signals import is_preparation_span as is_preparation_span

#: Every attribute :func:`resolve_kind` reads (a collector extracting facts needs only these for the kind).
KIND_KEYS: Final = frozenset(
    {
        attr.KIND,
        n.OI_SPAN_KIND,
        n.TRACELOOP_SPAN_KIND,
        n.LLM_REQUEST_TYPE,
        attr.GEN_AI_OPERATION_NAME,
        attr.GEN_AI_TOOL_NAME,
        attr.GEN_AI_PROVIDER_NAME,
        attr.GEN_AI_SYSTEM,
        attr.GEN_AI_USAGE_INPUT_TOKENS,
        attr.GEN_AI_USAGE_OUTPUT_TOKENS,
        n.GEN_AI_USAGE_PROMPT_TOKENS,
        n.GEN_AI_USAGE_COMPLETION_TOKENS,
    }
)

_OPENINFERENCE_KINDS: Final = {
    "LLM": "llm",
    "TOOL": "tool",
    "CHAIN": "chain",
    "PROMPT": "chain",
    "GUARDRAIL": "chain",
    "RETRIEVER": "retriever",
    "RERANKER": "retriever",
    "EMBEDDING": "embedding",
    "AGENT": "agent",
    "EVALUATOR": "other",
}
_TRACELOOP_KINDS: Final = {"workflow": "chain", "task": "chain", "agent": "agent", "tool": "tool"}
_REQUEST_TYPE_KINDS: Final = {
    "chat": "llm",
    "completion": "llm",
    "embedding": "embedding",
    "rerank": "retriever",
}
_OPERATION_KINDS: Final = {
    "chat": "llm",
    "text_completion": "llm",
    "generate_content": "llm",
    "embeddings": "embedding",
    "execute_tool": "tool",
    "invoke_agent": "agent",
    "create_agent": "agent",
    "retrieval": "retriever",
    "invoke_workflow": "chain",
    "chain": "chain",
    "memory": "memory",
    "route": "router",
}
#: ``llm.request.type`` -> the GenAI ``gen_ai.operation.name`` it corresponds to.
REQUEST_TYPE_OPERATIONS: Final = {
    "chat": "chat",
    "completion": "text_completion",
    "embedding": "embeddings",
    "rerank": "rerank",
}
_USAGE_KEYS: Final = (
    attr.GEN_AI_USAGE_INPUT_TOKENS,
    attr.GEN_AI_USAGE_OUTPUT_TOKENS,
    n.GEN_AI_USAGE_PROMPT_TOKENS,
    n.GEN_AI_USAGE_COMPLETION_TOKENS,
)


def resolve_kind(attributes: Mapping[str, Any]) -> str:
    """The tailcut kind of a span, from its attributes, by the rules in the module docstring.

    Only the keys in :data:`KIND_KEYS` are read, so a caller may pass a mapping holding just those.
    The nested-model-call rule needs the parent and is applied once the trace is assembled.

    Parameters
    ----------
    attributes
        The span's attributes (decoded values).

    Returns
    -------
    str
        One of ``tailcut.attributes.KINDS``.

    Examples
    --------
    >>> resolve_kind({"openinference.span.kind": "RERANKER"})
    'retriever'
    >>> resolve_kind({"gen_ai.system": "openai", "gen_ai.usage.prompt_tokens": 12})
    'llm'
    >>> resolve_kind({"http.method": "GET"})
    'other'
    """
    kind = attributes.get(attr.KIND)
    if kind in attr.KINDS:
        return str(kind)
    for key, table in (
        (n.OI_SPAN_KIND, _OPENINFERENCE_KINDS),
        (n.TRACELOOP_SPAN_KIND, _TRACELOOP_KINDS),
        (n.LLM_REQUEST_TYPE, _REQUEST_TYPE_KINDS),
        (attr.GEN_AI_OPERATION_NAME, _OPERATION_KINDS),
    ):
        value = attributes.get(key)
        if isinstance(value, str) and value in table:
            return table[value]
    if attributes.get(attr.GEN_AI_TOOL_NAME) is not None:
        return "tool"
    has_provider = (
        attributes.get(attr.GEN_AI_PROVIDER_NAME) is not None
        or attributes.get(attr.GEN_AI_SYSTEM) is not None
    )
    if has_provider and any(attributes.get(key) is not None for key in _USAGE_KEYS):
        return "llm"
    return "other"


class Source(NamedTuple):
    """One attribute a column may come from."""

    key: str
    #: ``str``, ``int``, or ``strs`` (a string, or an array of strings whose only element is used)
    type: Literal["str", "int", "strs"]
    #: Read only for spans of this kind (``traceloop.entity.name`` names a tool only on tool spans).
    kind: str | None = None


#: column -> its sources in order of precedence (the "Column fallbacks" table above).
COLUMN_SOURCES: Final[Mapping[str, tuple[Source, ...]]] = {
    "provider": (
        Source(attr.GEN_AI_PROVIDER_NAME, "str"),
        Source(attr.GEN_AI_SYSTEM, "str"),
        Source(n.OI_LLM_SYSTEM, "str"),
        Source(n.OI_LLM_PROVIDER, "str"),
    ),
    "model": (
        Source(attr.GEN_AI_REQUEST_MODEL, "str"),
        Source(attr.GEN_AI_RESPONSE_MODEL, "str"),
        Source(n.OI_LLM_REQUEST_MODEL_NAME, "str"),
        Source(n.OI_LLM_MODEL_NAME, "str"),
        Source(n.OI_EMBEDDING_MODEL_NAME, "str"),
        Source(n.OI_RERANKER_MODEL_NAME, "str"),
    ),
    "operation": (Source(attr.GEN_AI_OPERATION_NAME, "str"),),
    "input_tokens": (
        Source(attr.GEN_AI_USAGE_INPUT_TOKENS, "int"),
        Source(n.GEN_AI_USAGE_PROMPT_TOKENS, "int"),
        Source(n.OI_TOKEN_COUNT_PROMPT, "int"),
        Source(n.LLM_USAGE_PROMPT_TOKENS, "int"),
    ),
    "output_tokens": (
        Source(attr.GEN_AI_USAGE_OUTPUT_TOKENS, "int"),
        Source(n.GEN_AI_USAGE_COMPLETION_TOKENS, "int"),
        Source(n.OI_TOKEN_COUNT_COMPLETION, "int"),
        Source(n.LLM_USAGE_COMPLETION_TOKENS, "int"),
    ),
    "finish_reason": (
        Source(attr.GEN_AI_RESPONSE_FINISH_REASONS, "strs"),
        Source(n.LLM_RESPONSE_FINISH_REASON, "str"),
        Source(n.OI_LLM_FINISH_REASON, "str"),
    ),
    "tool_name": (
        Source(attr.GEN_AI_TOOL_NAME, "str"),
        Source(n.OI_TOOL_NAME, "str"),
        Source(n.TRACELOOP_ENTITY_NAME, "str", kind="tool"),
    ),
    "tool_call_id": (
        Source(attr.GEN_AI_TOOL_CALL_ID, "str"),
        Source(n.OI_TOOL_ID, "str"),
        Source(n.OI_TOOL_CALL_ID, "str"),
    ),
    "agent_name": (
        Source(attr.GEN_AI_AGENT_NAME, "str"),
        Source(n.OI_AGENT_NAME, "str"),
        Source(n.TRACELOOP_ENTITY_NAME, "str", kind="agent"),
    ),
    "error_type": (Source(attr.ERROR_TYPE, "str"),),
    "boundary": (Source(attr.BOUNDARY, "str"),),
    "occurrence": (Source(attr.OCCURRENCE, "int"),),
    "seq": (Source(attr.SEQ, "int"),),
    "attempt": (Source(attr.ATTEMPT, "int"),),
    "request": (Source(attr.REQUEST, "str"),),
    "request_sha256": (Source(attr.REQUEST_SHA256, "str"),),
    "response": (Source(attr.RESPONSE, "str"),),
    "response_sha256": (Source(attr.RESPONSE_SHA256, "str"),),
}

#: Attributes that repeat a payload column on tailcut's own spans; dropped from ``attributes`` when equal.
DUPLICATES: Final = {attr.GEN_AI_TOOL_CALL_ARGUMENTS: "request", attr.GEN_AI_TOOL_CALL_RESULT: "response"}


def source_value(value: Any, source: Source) -> tuple[Any, bool]:
    """``(column value, whole)`` when ``value`` fits ``source``'s type, else ``(None, False)``.

    ``whole`` says the column holds the value entirely (a finish-reasons array of several entries does
    not), so the attribute may leave the ``attributes`` map.
    """
    if source.type == "str":
        return (value, True) if isinstance(value, str) else (None, False)
    if source.type == "int":
        return (value, True) if isinstance(value, int) and not isinstance(value, bool) else (None, False)
    if isinstance(value, str):
        return value, True
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return value[0], len(value) == 1
    return None, False


def first_source(attributes: Mapping[str, Any], column: str, kind: str) -> tuple[Any, str | None, bool]:
    """``(value, key, whole)`` of the first source of ``column`` present in ``attributes`` (scalar form)."""
    for source in COLUMN_SOURCES[column]:
        if source.kind is not None and source.kind != kind:
            continue
        raw = attributes.get(source.key)
        if raw is None:
            continue
        value, whole = source_value(raw, source)
        if value is not None:
            return value, source.key, whole
    return None, None, False


def operation_for(operation: str | None, request_type: Any, kind: str) -> str | None:
    """The ``operation`` column: the GenAI name, else the OpenLLMetry request type's, else the kind's."""
    if operation is not None:
        return operation
    if isinstance(request_type, str) and request_type in REQUEST_TYPE_OPERATIONS:
        return REQUEST_TYPE_OPERATIONS[request_type]
    return None if kind == "other" else attr.OPERATION_FOR_KIND[kind]


def synthetic_boundary(
    kind: str, name: str, *, tool_name: str | None, provider: str | None, operation: str | None
) -> str | None:
    """A boundary name for a third-party boundary span, in tailcut's ``<kind>:<name>`` form.

    Examples
    --------
    >>> synthetic_boundary("llm", "chat gpt-4o", tool_name=None, provider="openai", operation="chat")
    'llm:openai.chat'
    >>> synthetic_boundary("chain", "plan", tool_name=None, provider=None, operation=None) is None
    True
    """
    if kind not in attr.BOUNDARY_KINDS:
        return None
    if kind == "tool":
        return f"tool:{tool_name or name}"
    if kind == "llm":
        return f"llm:{provider or 'unknown'}.{operation or 'chat'}"
    return f"{kind}:{name}"
