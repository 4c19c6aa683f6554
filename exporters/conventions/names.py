"""Attribute names of the third-party conventions tailcut reads (its own are in ``tailcut.attributes``).

Only names the normaliser maps are listed; everything else a span carries stays in the ``attributes`` map
verbatim. Sources: the OpenTelemetry GenAI semantic conventions (v1.26 to v1.41 and the
``semantic-conventions-genai`` successor), OpenInference (``openinference-semantic-conventions``) and
OpenLLMetry (``opentelemetry-semantic-conventions-ai``).
"""

from __future__ import annotations

from typing import Final

# --- OpenTelemetry GenAI: names tailcut does not write itself ------------------------------------------
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS: Final = "gen_ai.system_instructions"
GEN_AI_TOOL_DEFINITIONS: Final = "gen_ai.tool.definitions"
#: Pre-1.27 token names (renamed to ``gen_ai.usage.input_tokens`` / ``output_tokens``).
GEN_AI_USAGE_PROMPT_TOKENS: Final = "gen_ai.usage.prompt_tokens"
GEN_AI_USAGE_COMPLETION_TOKENS: Final = "gen_ai.usage.completion_tokens"
#: v1.26 content: JSON text of the messages, as span attributes or on the two content events.
GEN_AI_PROMPT: Final = "gen_ai.prompt"
GEN_AI_COMPLETION: Final = "gen_ai.completion"
EVENT_CONTENT_PROMPT: Final = "gen_ai.content.prompt"
EVENT_CONTENT_COMPLETION: Final = "gen_ai.content.completion"

# --- exceptions (OpenTelemetry semantic conventions) -------------------------------------------------------
EXCEPTION_EVENT: Final = "exception"
EXCEPTION_TYPE: Final = "exception.type"

# --- OpenInference ---------------------------------------------------------------------------------------
OI_SPAN_KIND: Final = "openinference.span.kind"
OI_INPUT_VALUE: Final = "input.value"
OI_INPUT_MIME_TYPE: Final = "input.mime_type"
OI_OUTPUT_VALUE: Final = "output.value"
OI_OUTPUT_MIME_TYPE: Final = "output.mime_type"
OI_JSON_MIME_TYPE: Final = "application/json"
OI_LLM_MODEL_NAME: Final = "llm.model_name"
OI_LLM_REQUEST_MODEL_NAME: Final = "llm.request.model_name"
OI_LLM_SYSTEM: Final = "llm.system"
OI_LLM_PROVIDER: Final = "llm.provider"
OI_LLM_INPUT_MESSAGES: Final = "llm.input_messages"  # flattened: llm.input_messages.N.message.*
OI_LLM_OUTPUT_MESSAGES: Final = "llm.output_messages"
OI_LLM_PROMPTS: Final = "llm.prompts"  # llm.prompts.N.prompt.text (completions API)
OI_LLM_CHOICES: Final = "llm.choices"  # llm.choices.N.completion.text
OI_LLM_TOOLS: Final = "llm.tools"  # llm.tools.N.tool.json_schema
OI_LLM_INVOCATION_PARAMETERS: Final = "llm.invocation_parameters"
OI_LLM_FINISH_REASON: Final = "llm.finish_reason"
OI_TOKEN_COUNT_PROMPT: Final = "llm.token_count.prompt"
OI_TOKEN_COUNT_COMPLETION: Final = "llm.token_count.completion"
OI_EMBEDDING_MODEL_NAME: Final = "embedding.model_name"
OI_RERANKER_MODEL_NAME: Final = "reranker.model_name"
OI_RETRIEVAL_DOCUMENTS: Final = "retrieval.documents"  # retrieval.documents.N.document.*
OI_TOOL_NAME: Final = "tool.name"
OI_TOOL_ID: Final = "tool.id"
OI_TOOL_PARAMETERS: Final = "tool.parameters"  # on TOOL spans: the JSON Schema of the tool's arguments
OI_TOOL_CALL_ID: Final = "tool_call.id"
OI_TOOL_CALL_ARGUMENTS: Final = "tool_call.function.arguments"
OI_AGENT_NAME: Final = "agent.name"

# --- OpenLLMetry (Traceloop) -------------------------------------------------------------------------------
TRACELOOP_SPAN_KIND: Final = "traceloop.span.kind"
TRACELOOP_ENTITY_NAME: Final = "traceloop.entity.name"
TRACELOOP_ENTITY_INPUT: Final = "traceloop.entity.input"
TRACELOOP_ENTITY_OUTPUT: Final = "traceloop.entity.output"
LLM_REQUEST_TYPE: Final = "llm.request.type"
LLM_REQUEST_FUNCTIONS: Final = (
    "llm.request.functions"  # llm.request.functions.N.{name,description,parameters}
)
LLM_RESPONSE_FINISH_REASON: Final = "llm.response.finish_reason"
LLM_USAGE_PROMPT_TOKENS: Final = "llm.usage.prompt_tokens"  # OpenLLMetry before the gen_ai.* rename
LLM_USAGE_COMPLETION_TOKENS: Final = "llm.usage.completion_tokens"
#: Flattened prompt and completion messages: gen_ai.prompt.N.{role,content,...}, gen_ai.completion.N.*
OPENLLMETRY_PROMPT_PREFIX: Final = "gen_ai.prompt."
OPENLLMETRY_COMPLETION_PREFIX: Final = "gen_ai.completion."
