"""The chat template the `lm` policy acts with, and the check that it can render a tool call.

`[model] chat_template` (or `[policy] chat_template`) replaces the model's own template: the
name of a template TRL ships (`qwen2_5`, `llama3_2`: the files of trl/chat_templates/) or the
path of a .jinja file (read where the backend runs). Some models' own templates ignore tools,
or fail on an assistant message that only calls one (SmolLM2-135M-Instruct's), so the model
check (app/local/server/model_check.py) renders a two-turn tool-calling conversation before a job
starts, and names the fix when it cannot. docs/embedded-policy.md#chat-templates.

Nothing here imports torch at module level; trl and transformers are imported inside the
functions that need them (they import torch).
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.local.policies.base import message_text
from app.local.policies.lm.model import ModelUnavailable

TEMPLATE_FOLDER = "chat_templates"
MAX_TEMPLATE_BYTES = 1 << 20  # a chat template is a few kilobytes; a megabyte is not one
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
CHAT_KWARGS = {"enable_thinking": False}  # templates that know it open no thinking block (Qwen3)

# The conversation the check renders: what a task app sends on its second turn (OpenAI's shape:
# the assistant's first answer is a tool call without text, its result a `tool` message).
PROBE_TOOL = "press_button"
PROBE_DESCRIPTION = "Press one of the labelled buttons."
PROBE_TOOLS = [{"type": "function", "function": {
    "name": PROBE_TOOL, "description": PROBE_DESCRIPTION,
    "parameters": {"type": "object", "properties": {"label": {"type": "string", "enum": ["A", "B"]}},
                   "required": ["label"]}}}]
PROBE_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You press buttons."},
    {"role": "user", "content": "Press A."},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function", "function": {"name": PROBE_TOOL, "arguments": '{"label": "A"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "You pressed A. Now press B."},
]


def trl_template_folder() -> Path | None:
    """trl/chat_templates/, found without importing trl (which imports torch)."""
    spec = importlib.util.find_spec("trl")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    folders = [Path(location) / TEMPLATE_FOLDER for location in locations]
    return next((folder for folder in folders if folder.is_dir()), None)


def trl_template_names() -> list[str]:
    """The templates TRL ships, by name (its *_training variants left out: TRL picks those)."""
    folder = trl_template_folder()
    if folder is None:
        return []
    return sorted(p.stem for p in folder.glob("*.jinja") if not p.stem.endswith("_training"))


def is_template_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "../", "~")) or spec.endswith(".jinja") or "/" in spec


def chat_template_text(spec: str) -> tuple[str, str]:
    """(the template's text, how it is named in messages) for a `chat_template` value, or
    ModelUnavailable saying what is wrong and what to write instead."""
    text = spec.strip()
    if is_template_path(text):
        return _template_file(text), text
    if not _NAME.match(text):
        raise ModelUnavailable(f"[model] chat_template {text[:100]!r} is neither the name of a template TRL ships "
                               "nor the path of a .jinja file")
    folder = trl_template_folder()
    path = folder / f"{text}.jinja" if folder is not None else None
    if path is None or not path.is_file():
        names = trl_template_names()
        shipped = f"TRL ships: {', '.join(names)}" if names else "TRL is not installed here (the trainer extra)"
        raise ModelUnavailable(f"[model] chat_template {text!r} is not a template TRL ships ({shipped}); "
                               "or give the path of a .jinja file")
    return path.read_text(encoding="utf-8"), f"{text} (TRL's)"


def _template_file(spec: str) -> str:
    # Only a .jinja file is read: a render error quotes the template's text, and the backend
    # must not show pieces of any other file of its machine (a .env) to a client.
    if not spec.endswith(".jinja"):
        raise ModelUnavailable(f"[model] chat_template {spec!r} is not a .jinja file: a chat template file's name "
                               "ends in .jinja")
    path = Path(spec).expanduser()
    try:
        if not path.is_file():
            why = "does not exist" if not path.exists() else "is not a file"
            raise ModelUnavailable(f"[model] chat_template {spec!r} {why} (a path is read where the backend runs)")
        if path.stat().st_size > MAX_TEMPLATE_BYTES:
            raise ModelUnavailable(f"[model] chat_template {spec!r} is over 1 MB: not a chat template")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelUnavailable(f"[model] chat_template {spec!r} cannot be read ({type(exc).__name__})") from None


def own_template(tokenizer: Any) -> str | None:
    template = tokenizer.chat_template
    if isinstance(template, dict):
        template = template.get("default")
    return template if isinstance(template, str) and template else None


def acting_template(tokenizer: Any, base: str, own_words: str = "own") -> tuple[str, str]:
    """The template the policy acts with: the tokenizer's when prefix-preserving, else TRL's
    training variant of it; one TRL does not know stays as it is (and episodes restart:
    counted). Returns (template, how it was chosen, in words: `own_words` names the
    tokenizer's template, "as written" when [model] chat_template replaced it)."""
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

    own = own_template(tokenizer)
    if own is None:
        raise ModelUnavailable(f"the tokenizer of {base} has no chat template; add one to its tokenizer_config.json "
                               "(or chat_template.jinja), or set [model] chat_template")
    try:
        if is_chat_template_prefix_preserving(tokenizer):
            return own, f"{own_words} (prefix-preserving)"
    except Exception:  # noqa: BLE001 - a template that cannot render the probe: try TRL's
        pass
    try:
        training = get_training_chat_template(tokenizer)
    except (ValueError, TypeError):
        training = None
    if training:
        whose = "the model's own" if own_words == "own" else f"the template {own_words}"
        return training, f"TRL's training variant ({whose} is not prefix-preserving)"
    return own, f"{own_words} (not prefix-preserving, unknown to TRL: episodes are re-rendered each turn)"


def _probe_conversations() -> list[list[dict[str, Any]]]:
    """The probe as task apps send it: the tool call's message with `content: null`, and without
    `content` at all."""
    without = [dict(m) for m in PROBE_MESSAGES]
    del without[2]["content"]
    return [PROBE_MESSAGES, without]


def history_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as the policy renders it: tool calls' `arguments` as objects where the task
    app echoed OpenAI's JSON string (templates render `arguments | tojson` or iterate `arguments |
    items`: a string is encoded twice, or fails), content parts joined into text. The wire
    answer keeps OpenAI's string (docs/embedded-policy.md#tool-call-arguments-and-the-templates-scaffold)."""
    clean = dict(message)
    if isinstance(clean.get("content"), list):
        clean["content"] = message_text(clean)
    calls = clean.get("tool_calls")
    if isinstance(calls, list):
        clean["tool_calls"] = [_call_with_object_arguments(call) for call in calls]
    return clean


def _call_with_object_arguments(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(arguments := function.get("arguments"), str):
        return call
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return call  # not JSON: rendered as the task app sent it
    if not isinstance(parsed, dict):
        return call
    return {**call, "function": {**function, "arguments": parsed}}


@dataclass(frozen=True)
class ToolCallScaffold:
    """What the template renders for an assistant turn that calls one tool, around the tool's
    name and its arguments (JSON): `before` NAME `middle` ARGUMENTS `after`, then the end of
    turn. Generating exactly this makes the next turn's render extend the generated text."""

    before: str
    middle: str
    after: str

    def head(self, name: str) -> str:
        return f"{self.before}{name}{self.middle}"


# Qwen's (Hermes') scaffold: the one used when a template's own cannot be learned (said so).
HERMES_SCAFFOLD = ToolCallScaffold('<tool_call>\n{"name": "', '", "arguments": ', "}\n</tool_call>")
_PROBE_ARGUMENTS = {"label": "A"}


def _render(tokenizer: Any, template: str, messages: list[dict[str, Any]], generation: bool) -> str:
    return str(tokenizer.apply_chat_template(messages, tools=PROBE_TOOLS, tokenize=False,
                                             add_generation_prompt=generation, chat_template=template,
                                             **CHAT_KWARGS))


def tool_call_scaffold(tokenizer: Any, template: str, end_of_turn: str) -> ToolCallScaffold | str:
    """The template's tool-call scaffold, learned by rendering a probe call (the text the
    assistant's turn adds to the generation prompt, with the name and arguments found in it),
    or why it cannot be learned, in words. `end_of_turn`: the eos token's text."""
    prompt_messages = [history_message(m) for m in PROBE_MESSAGES[:2]]
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": PROBE_TOOL, "arguments": dict(_PROBE_ARGUMENTS)}}]}
    try:
        prompt = _render(tokenizer, template, prompt_messages, True)
        turn = _render(tokenizer, template, [*prompt_messages, call], False)
    except Exception as exc:  # noqa: BLE001 - any template error is the answer
        return f"cannot render a tool call ({type(exc).__name__}: {str(exc)[:200]})"
    if not turn.startswith(prompt):
        return "renders an assistant's turn that does not extend its own generation prompt"
    turn = turn[len(prompt):]
    arguments = json.dumps(_PROBE_ARGUMENTS)
    at_name = turn.find(PROBE_TOOL)
    at_arguments = turn.find(arguments, at_name + len(PROBE_TOOL)) if at_name >= 0 else -1
    if at_arguments < 0:
        return "does not render a tool call as its name followed by its arguments as a JSON object"
    after = turn[at_arguments + len(arguments):]
    if not end_of_turn or end_of_turn not in after:
        return f"does not end an assistant's tool call with the end-of-turn token {end_of_turn!r}"
    return ToolCallScaffold(turn[:at_name], turn[at_name + len(PROBE_TOOL):at_arguments],
                            after[:after.index(end_of_turn)])


def where_texts_part(old: str, new: str, width: int = 40) -> dict[str, Any]:
    """Where a new render stops extending the episode's text: the offset and a few characters of
    each side from there (with a little context before), for a warning."""
    at = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    return {"offset": at, "before": old[max(0, at - 20):at], "generated": old[at:at + width],
            "rendered": new[at:at + width]}


def episode_problem(tokenizer: Any, template: str, end_of_turn: str) -> str | None:
    """Why a two-turn tool-calling episode would restart with `template` (the next turn's render
    does not extend the text generated with the template's scaffold), or None."""
    scaffold = tool_call_scaffold(tokenizer, template, end_of_turn)
    if isinstance(scaffold, str):
        return scaffold
    messages = [history_message(m) for m in PROBE_MESSAGES]
    try:
        prompt = _render(tokenizer, template, messages[:2], True)
        second = _render(tokenizer, template, messages, True)
    except Exception as exc:  # noqa: BLE001 - any template error is the answer
        return f"cannot render a tool-calling conversation ({type(exc).__name__}: {str(exc)[:200]})"
    generated = prompt + scaffold.head(PROBE_TOOL) + json.dumps(_PROBE_ARGUMENTS) + scaffold.after + end_of_turn
    if second.startswith(generated):
        return None
    part = where_texts_part(generated, second)
    return (f"is not prefix-preserving in a tool-calling episode: the second turn's render parts from the first "
            f"turn's generated text at character {part['offset']} (generated {part['generated']!r}, rendered "
            f"{part['rendered']!r}), so every episode would restart and train on its last turn only")


def render_problem(tokenizer: Any, template: str) -> str | None:
    """Why `template` cannot act in a tool-calling episode, or None: it renders the second turn
    of one (a tool call and its result), shows the tool to the model, keeps the call, and
    renders that turn so that the next render extends what the model generated (every turn of
    an episode is then trained: docs/embedded-policy.md#the-acting-template-and-the-joined-sequence)."""
    try:
        texts = [_render(tokenizer, template, [history_message(m) for m in messages], True)
                 for messages in _probe_conversations()]
    except Exception as exc:  # noqa: BLE001 - any template error is the answer
        return f"cannot render a tool-calling conversation ({type(exc).__name__}: {str(exc)[:200]})"
    text = texts[0]
    if PROBE_DESCRIPTION not in text:
        return "ignores tools: the task app's tools would never be shown to the model"
    if '"A"' not in text or "You pressed A." not in text:
        return "drops the assistant's tool call or its result from the conversation"
    return episode_problem(tokenizer, template, str(getattr(tokenizer, "eos_token", None) or ""))


def suggested_template(tokenizer: Any) -> str:
    """A template TRL ships that speaks the model's own chat tokens, in words for a fix."""
    own = own_template(tokenizer) or ""
    if "<|im_start|>" in own:
        return '[model] chat_template = "qwen2_5" (TRL\'s, in the ChatML tokens this model was trained on)'
    if "<|start_header_id|>" in own:
        return '[model] chat_template = "llama3_2" (TRL\'s, in the Llama 3 tokens this model was trained on)'
    return ('[model] chat_template = a template TRL ships that uses this model\'s chat tokens (qwen2_5 for '
            'ChatML models, llama3_2 for Llama 3 ones), or the path of a .jinja file that renders tools')


@dataclass(frozen=True)
class TemplateVerdict:
    """What the policy would act with and whether it can: `problem` None when it renders a
    tool-calling conversation; `fix` names what to set otherwise."""

    template: str | None
    how: str | None
    problem: str | None
    fix: str


def judge_template(tokenizer: Any, base: str, chat_template: str | None) -> TemplateVerdict:
    """The template a job of `base` would act with (`chat_template` in place of the model's own
    when given) and whether it renders a two-turn tool call. `tokenizer` is the model's own; its
    template is replaced here, so pass one that is not used for anything else."""
    suggestion = suggested_template(tokenizer)  # from the model's own template, before any replaces it
    try:
        if chat_template:
            tokenizer.chat_template = chat_template_text(chat_template)[0]
        template, how = acting_template(tokenizer, base, "as written" if chat_template else "own")
    except ModelUnavailable as exc:
        return TemplateVerdict(None, None, str(exc), f"set {suggestion}")
    problem = render_problem(tokenizer, template)
    if problem is None:
        return TemplateVerdict(template, how, None, "")
    named = f"[model] chat_template {chat_template!r}" if chat_template else f"the chat template of {base}"
    fix = ("fix the template, or name another: " if chat_template else "set ") + suggestion
    return TemplateVerdict(template, how, f"{named} {problem}", fix)


def stand_in_tokenizer(template: str | None, special_tokens: dict[str, str]) -> Any:
    """A tokenizer that can render and judge `template` and nothing more: one token per byte,
    with the model's special tokens (`bos_token` → its text) as templates name them. The model
    check of a .gguf file judges its template with it (app/local/server/model_check.py): building
    the real one means reading the file's whole vocabulary (seconds to a minute), and rendering a
    template needs none of it. Token ids differ from the model's; whether a render keeps its
    prefix (TRL's test) does not, as it compares a text with its continuation."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={text: index for index, text in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    fast: Any = PreTrainedTokenizerFast  # untyped
    tokenizer = fast(tokenizer_object=backend, **special_tokens)
    tokenizer.chat_template = template
    return tokenizer
