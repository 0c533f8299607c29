"""Observations: a coding agent's hook events compressed without an LLM, and what a
session's observations say (its concepts, the question it left open)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, get_args

from baton.server.model.memory_models import HookType
from baton.server.model.models import Observation, Session
from baton.server.model.patches import patched_files

HOOK_TYPES: tuple[str, ...] = get_args(HookType)
# Events that mark a session's life, not work done in it: a session holding only these (as
# `claude mcp list` leaves one: a lone SessionEnd) is never "where were we".
LIFECYCLE_HOOKS = frozenset(
    {"session_start", "session_end", "stop", "subagent_stop", "pre_compact", "notification"}
)
# Tool name fragments -> observation type, checked in this order.
TOOL_TYPES = (
    (("edit", "patch"), "file_edit"),
    (("write", "create"), "file_write"),
    (("read", "view"), "file_read"),
    (("bash", "shell"), "command_run"),
    (("grep", "glob", "search"), "search"),
    (("fetch", "http"), "web_fetch"),
    (("task", "agent"), "subagent"),
)
HOOK_TYPE_NAMES = {
    "prompt_submit": "conversation",
    "notification": "conversation",
    "stop": "conversation",
    "session_start": "session",
    "session_end": "session",
    "pre_compact": "compact",
    "subagent_start": "subagent",
    "subagent_stop": "subagent",
    "task_completed": "task",
}
FILE_KEYS = ("file_path", "filePath", "path", "notebook_path", "files", "paths")
NARRATIVE_LIMIT = 600
CONCEPT_COUNT = 5
STOPWORDS = frozenset(
    """
    the and for with that this from into then than have has was were are not you your our
    its it's can will should would could what when where which who how why use used file
    files run ran tool output input also just like make made need needs want wants there
    their them they these those here some more most other only over such very been being
    does done doing each about after before again against because between both during under
    until while yes okay sure please thanks thank
    """.split()
)
# Words that name the machinery, not the work: hook names, Claude Code's tool names and the
# keys of its hook payloads. They never become concepts.
MACHINERY = frozenset(
    {part for hook in HOOK_TYPES for part in hook.split("_")}
    | {
        "tool",
        "hook",
        "event",
        "name",
        "type",
        "response",
        "result",
        "stdout",
        "stderr",
        "read",
        "write",
        "edit",
        "multiedit",
        "bash",
        "grep",
        "glob",
        "task",
        "todowrite",
        "webfetch",
        "websearch",
        "notebookedit",
        "notebookread",
        "exitplanmode",
        "agent",
        "session",
        "transcript",
        "path",
        "file_path",
        "tool_name",
        "tool_input",
        "tool_response",
        "hook_event_name",
        "session_id",
        "transcript_path",
        "cwd",
        "permission_mode",
        "old_string",
        "new_string",
        "replace_all",
        "command",
        "description",
        "content",
        "pattern",
        "prompt",
        "message",
        "user",
        "assistant",
        "true",
        "false",
        "null",
        "none",
        "interrupted",
        "isimage",
    }
)
PATH_LIKE = re.compile(r"\S*[/\\]\S*")
CONCEPT_WORD = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
QUESTION_LABEL = re.compile(r"^(?:open(?: question)?|question|q)\s*[:\-]\s*", re.IGNORECASE)
# Who asks the user: the assistant's last message (Stop) and Claude Code's notifications.
ASKING_HOOKS = ("stop", "notification", "subagent_stop")


def concepts_of(observations: Sequence[Observation], count: int = CONCEPT_COUNT) -> list[str]:
    """The session's most frequent whole words in what was said and done (prompts, messages,
    tool inputs), leaving out stop-words, tool and hook names and payload keys."""
    tools = {o.title.lower() for o in observations}
    counts: Counter[str] = Counter()
    for observation in observations:
        prose = PATH_LIKE.sub(" ", observation.narrative.lower())  # files are listed apart
        counts.update(
            word
            for word in CONCEPT_WORD.findall(prose)
            if len(word) > 3
            and word not in STOPWORDS
            and word not in MACHINERY
            and word not in tools
        )
    return [word for word, _ in counts.most_common(count)]


def last_question(text: str | None) -> str | None:
    """The last sentence of ``text`` that asks something (``"Done. Open: A or B? Ship."`` ->
    ``"A or B?"``)."""
    if not text:
        return None
    asked = [
        part.strip() for part in SENTENCE_END.split(text.strip()) if part.strip().endswith("?")
    ]
    return QUESTION_LABEL.sub("", asked[-1]).strip() or None if asked else None


def open_question(session: Session, observations: Sequence[Observation]) -> str | None:
    """A question put to the user that nobody answered: the summary's (unless the user wrote
    after the session ended), else the newest one the assistant asked with no prompt after it.
    The user's own prompts are answers or requests, never the open question."""
    asked = last_question(session.summary)
    if asked and not any(
        o.hook_type == "prompt_submit" and session.ended_at and o.created_at > session.ended_at
        for o in observations
    ):
        return asked
    for observation in reversed(observations):
        if observation.hook_type == "prompt_submit":
            return None  # the user spoke after any earlier question
        if observation.hook_type in ASKING_HOOKS:
            asked = last_question(observation.narrative)
            if asked:
                return asked
    return None


def _first(data: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if data.get(name) not in (None, ""):
            return data[name]
    return None


def _values(value: Any) -> str:
    """The words of a JSON value without its keys (keys are payload machinery, not work)."""
    if isinstance(value, dict):
        return " ".join(_values(item) for item in value.values())
    if isinstance(value, list | tuple):
        return " ".join(_values(item) for item in value)
    return "" if value is None or isinstance(value, bool) else str(value)


def _text(value: Any, limit: int = 300) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        preferred = _first(
            value,
            "command",
            "description",
            "pattern",
            "query",
            "url",
            "file_path",
            "path",
            "prompt",
            "content",
            "stdout",
            "output",
            "error",
        )
        value = preferred if preferred is not None else value
    text = " ".join(_values(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def compress(hook_type: str, data: Mapping[str, Any]) -> tuple[str, str, str, list[str]]:
    """(type, title, narrative, files) of a hook event, without an LLM."""
    tool = _first(data, "tool_name", "toolName", "tool")
    tool_input = _first(data, "tool_input", "toolInput", "input")
    output = _first(data, "tool_response", "tool_output", "toolOutput", "output", "error")
    prompt = _first(data, "prompt", "message", "last_assistant_message", "last_message", "summary")
    if isinstance(tool, str) and tool:
        lowered = tool.lower()
        kind = next(
            (name for parts, name in TOOL_TYPES if any(p in lowered for p in parts)), "tool"
        )
        title = tool
    else:
        kind = HOOK_TYPE_NAMES.get(hook_type, "event")
        title = hook_type.replace("_", " ")
    parts = [_text(prompt)] if prompt is not None else []
    if tool_input is not None:
        parts.append(_text(tool_input))
    if output is not None:
        parts.append(
            ("failed: " if hook_type == "post_tool_failure" else "→ ") + _text(output, 200)
        )
    narrative = " ".join(part for part in parts if part)[:NARRATIVE_LIMIT] or title
    files: list[str] = []
    if isinstance(tool_input, dict):
        patched = patched_files(tool_input.get("command"), data.get("cwd"))
        files = patched or _named_files(tool_input)
    return kind, title, narrative, files


def _named_files(tool_input: Mapping[str, Any]) -> list[str]:
    """The files a tool's input names in its path fields (:data:`FILE_KEYS`), each once."""
    files: list[str] = []
    for key in FILE_KEYS:
        found = tool_input.get(key)
        for item in found if isinstance(found, list) else [found]:
            if isinstance(item, str) and item and item not in files:
                files.append(item)
    return files
