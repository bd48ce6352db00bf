"""Which format a source is, from its content (docs/contract.md §6): JSON Lines of session lines is
`claude-code`; a JSON body is told apart by its keys. Ambiguous or unknown → an error
naming the formats tried."""

from __future__ import annotations

import json
from typing import Any

from conversations.core import strictjson
from conversations.core.importers.claude_code import SESSION_LINE_KEYS
from conversations.core.importers.common import FORMATS, EmptyFileError, Format, ImportFormatError

TRIED = ", ".join(FORMATS)
ANTHROPIC_KEYS = {
    "system",
    "anthropic_version",
    "stop_sequences",
    "top_k",
    "thinking",
    "mcp_servers",
    "container",
}
OPENAI_KEYS = {
    "n",
    "response_format",
    "max_completion_tokens",
    "logprobs",
    "frequency_penalty",
    "presence_penalty",
    "parallel_tool_calls",
    "reasoning_effort",
    "modalities",
    "audio",
    "prediction",
    "seed",
}
ANTHROPIC_BLOCKS = {
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "document",
    "server_tool_use",
    "image",
}
OPENAI_PARTS = {"image_url", "input_audio", "refusal", "file"}


def detect(raw: bytes) -> Format:
    """The format of `raw`; ImportFormatError when it fits none or more than one
    (EmptyFileError when it holds nothing but whitespace)."""
    return detect_where(raw)[0]


def detect_where(raw: bytes) -> tuple[Format, str]:
    """The format of `raw` and the line or JSON path that shows it (the first evidence);
    ImportFormatError when it fits none or more than one (EmptyFileError: only whitespace)."""
    if not raw.strip():
        raise EmptyFileError()
    try:
        body = json.loads(raw)
    except RecursionError:  # far deeper than the record allows: say where, as a read would
        try:
            strictjson.loads(raw)
        except strictjson.StrictJSONError as exc:
            raise ImportFormatError(exc.field, exc.reason) from None
        raise  # not reached: the strict parser refuses what the plain one cannot nest
    except json.JSONDecodeError as exc:
        if _is_session_file(raw):
            return "claude-code", "line 1"
        if raw.lstrip()[:1] in (b"{", b"["):
            raise ImportFormatError(
                f"line {exc.lineno}, column {exc.colno}", f"is not valid JSON ({exc.msg})"
            ) from None
        raise ImportFormatError(
            "body", f"is neither a JSON document nor JSON Lines of a known format (tried {TRIED})"
        ) from None
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"byte {exc.start}", "is not valid UTF-8") from None
    return detect_value(body)


def detect_value(body: Any) -> tuple[Format, str]:
    if isinstance(body, list):
        if body and all(isinstance(m, dict) and "parts" in m and "role" in m for m in body):
            return "otel-genai", "[0].parts"
        raise _unknown("an array that is not a list of GenAI messages")
    if not isinstance(body, dict):
        raise _unknown("neither an object nor an array")
    if "resourceSpans" in body:
        return "otel-genai", "resourceSpans"
    genai = next((str(key) for key in body if str(key).startswith("gen_ai.")), None)
    if genai is not None:
        return "otel-genai", genai
    if isinstance(body.get("type"), str) and SESSION_LINE_KEYS & set(body):
        return "claude-code", "line 1"
    if "messages" not in body and ("input" in body or "instructions" in body):
        return "openai-responses", "input" if "input" in body else "instructions"
    if "messages" not in body:
        raise _unknown("an object without `messages`, `input` or GenAI attributes")
    anthropic, openai = _evidence(body)
    if anthropic and not openai:
        return "anthropic", anthropic
    if openai and not anthropic:
        return "openai-chat", openai
    model = str(body.get("model", ""))
    if not anthropic and not openai:
        if model.startswith("claude"):
            return "anthropic", "model"
        if model.startswith(("gpt", "o1", "o3", "o4", "chatgpt")):
            return "openai-chat", "model"
    raise ImportFormatError(
        "body",
        f"could be anthropic or openai-chat (tried {TRIED}); name it with ?format= (--format)",
    )


def _evidence(body: dict[str, Any]) -> tuple[str, str]:
    """The first path showing an Anthropic body and the first showing an OpenAI one
    ("" for none)."""
    anthropic = next((key for key in body if key in ANTHROPIC_KEYS), "")
    openai = next((key for key in body if key in OPENAI_KEYS), "")
    tools = body.get("tools")
    for index, tool in enumerate(tools if isinstance(tools, list) else []):
        if isinstance(tool, dict):
            if "input_schema" in tool or str(tool.get("type", "")).startswith(
                ("web_", "code_", "bash_", "text_editor", "computer_")
            ):
                anthropic = anthropic or f"tools[{index}]"
            if "function" in tool:
                openai = openai or f"tools[{index}].function"
    messages = body.get("messages")
    for index, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict):
            continue
        path = f"messages[{index}]"
        if message.get("role") in ("system", "developer", "tool", "function"):
            openai = openai or f"{path}.role"
        for key in ("tool_calls", "tool_call_id", "function_call"):
            if key in message:
                openai = openai or f"{path}.{key}"
        content = message.get("content")
        if isinstance(content, list):
            for at, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind in ANTHROPIC_BLOCKS and not (kind == "image" and "image_url" in part):
                    anthropic = anthropic or f"{path}.content[{at}].type"
                if kind in OPENAI_PARTS:
                    openai = openai or f"{path}.content[{at}].type"
    return anthropic, openai


def _is_session_file(raw: bytes) -> bool:
    """Every non-blank line among the first few is a JSON object of a session line."""
    seen = 0
    for line in raw.splitlines()[:20]:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError):
            return seen > 0  # a bad line later is the importer's error to name
        if not isinstance(value, dict) or "type" not in value:
            return False
        seen += 1
    return seen > 0


def _unknown(what: str) -> ImportFormatError:
    return ImportFormatError("body", f"is {what}: not a known format (tried {TRIED})")
