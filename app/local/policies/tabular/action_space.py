"""From a tool's JSON schema to a discrete action space the embedded policy can learn in.

A task app offers the model tools (OpenAI function tools); the embedded backend answers as
the model would, by calling one with arguments that validate against its parameters schema.
This module compiles that schema into *slots*: each slot is one discrete choice (an enum
value, a boolean, a bounded integer, a point of a bounded number's range, an array's length,
one array element). A composite action is one pick per slot; `ActionSpace.build` turns the
picks back into arguments. What cannot be chosen from a finite set (free text, an unbounded
number, an unsupported keyword) raises UnsupportedSchema naming the tool and the part, so the
job fails at once instead of answering something that does nothing. docs/embedded-policy.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_CHOICES = 64  # per slot: an integer range wider than this is sampled at evenly spaced points
NUMBER_POINTS = 5  # points of a bounded number's range
MAX_ARRAY_ITEMS = 8  # longest array the policy composes
MAX_SLOTS = 64
MAX_DEPTH = 16
_UNSUPPORTED_KEYWORDS = ("anyOf", "oneOf", "allOf", "not", "if", "patternProperties")


class UnsupportedSchema(ValueError):
    """The tool's schema asks for something the embedded policy cannot choose."""


@dataclass(frozen=True)
class Slot:
    name: str  # where in the arguments: "actions[2]", "target.x", "actions#len"
    choices: tuple[Any, ...]

    @property
    def labels(self) -> tuple[str, ...]:
        """The choices as the policy's table keys them."""
        return tuple(json.dumps(c, sort_keys=True) for c in self.choices)


@dataclass(frozen=True)
class _Node:
    """A compiled piece of the schema: a constant, a slot, an object or an array."""

    kind: str  # "const" | "slot" | "object" | "array"
    value: Any = None  # const value
    slot: int = -1  # index into ActionSpace.slots ("slot"; "array": its length slot)
    fields: tuple[tuple[str, _Node], ...] = ()  # object
    items: tuple[_Node, ...] = ()  # array: one node per position
    min_items: int = 0


@dataclass(frozen=True)
class ActionSpace:
    tool: str
    slots: tuple[Slot, ...]
    root: _Node

    def values(self, picks: Sequence[int]) -> list[Any]:
        return [slot.choices[pick] for slot, pick in zip(self.slots, picks, strict=True)]

    def build(self, picks: Sequence[int]) -> dict[str, Any]:
        """The arguments for one pick (an index into each slot's choices)."""
        value = _build(self.root, self.values(picks))
        return value if isinstance(value, dict) else {}

    def used_slots(self, picks: Sequence[int]) -> list[int]:
        """The slots whose pick shows in the arguments (array elements past the chosen length
        do not): only those are learned from."""
        used: list[int] = []
        _collect(self.root, self.values(picks), used)
        return used


def compile_tool(tool: dict[str, Any]) -> ActionSpace:
    """The action space of one OpenAI function tool ({"type": "function", "function": {...}})."""
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise UnsupportedSchema("a tool must be {\"type\": \"function\", \"function\": {\"name\": ...}}")
    name = function["name"]
    schema = function.get("parameters") or {"type": "object", "properties": {}}
    compiler = _Compiler(name, schema)
    root = compiler.node(schema, "", 0)
    if root.kind != "object":
        raise UnsupportedSchema(f"tool {name!r}: its parameters must be an object schema")
    return ActionSpace(name, tuple(compiler.slots), root)


def choose_tool(tools: Sequence[dict[str, Any]], tool_choice: Any) -> dict[str, Any] | None:
    """The tool to call, honouring `tool_choice`: "none" → no tool; a named function → that
    one; "auto"/"required"/absent → the first tool."""
    if not tools or tool_choice == "none":
        return None
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        for tool in tools:
            if tool["function"]["name"] == wanted:
                return tool
        raise UnsupportedSchema(f"tool_choice names {wanted!r}, which is not among the tools offered")
    return tools[0]


class _Compiler:
    def __init__(self, tool: str, schema: dict[str, Any]) -> None:
        self.tool = tool
        self.defs = {**(schema.get("definitions") or {}), **(schema.get("$defs") or {})}
        self.slots: list[Slot] = []

    def fail(self, where: str, what: str) -> UnsupportedSchema:
        return UnsupportedSchema(f"tool {self.tool!r}: {where or 'its parameters'}: {what}")

    def add_slot(self, name: str, choices: Sequence[Any]) -> int:
        if len(self.slots) >= MAX_SLOTS:
            raise self.fail(name, f"more than {MAX_SLOTS} choices per call")
        self.slots.append(Slot(name, tuple(choices)))
        return len(self.slots) - 1

    def resolve(self, schema: Any, where: str) -> dict[str, Any]:
        for _ in range(MAX_DEPTH):
            if not isinstance(schema, dict):
                raise self.fail(where, "the schema is not an object")
            ref = schema.get("$ref")
            if ref is None:
                return schema
            name = ref.rsplit("/", 1)[-1] if isinstance(ref, str) and ref.startswith("#/") else None
            if name not in self.defs:
                raise self.fail(where, f"$ref {ref!r} is not a local definition")
            schema = self.defs[name]
        raise self.fail(where, "$ref chain too long")

    def node(self, schema: Any, where: str, depth: int) -> _Node:
        if depth > MAX_DEPTH:
            raise self.fail(where, f"nested more than {MAX_DEPTH} levels")
        schema = self.resolve(schema, where)
        if "const" in schema:
            return _Node("const", value=schema["const"])
        if isinstance(schema.get("enum"), list):
            if not schema["enum"]:
                raise self.fail(where, "an empty enum")
            return _Node("slot", slot=self.add_slot(where or "value", schema["enum"][:MAX_CHOICES]))
        for keyword in _UNSUPPORTED_KEYWORDS:
            if keyword in schema:
                raise self.fail(where, f"'{keyword}' is not supported")
        return self.typed_node(schema, where, depth)

    def typed_node(self, schema: dict[str, Any], where: str, depth: int) -> _Node:
        """A schema without const or enum, by its type."""
        kind = schema.get("type")
        if isinstance(kind, list):  # ["string", "null"] and the like: take the first we can act in
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object" or (kind is None and "properties" in schema):
            return self.object_node(schema, where, depth)
        if kind == "array":
            return self.array_node(schema, where, depth)
        if kind == "boolean":
            return _Node("slot", slot=self.add_slot(where or "value", (False, True)))
        if kind in ("integer", "number"):
            choices = self.range_choices(schema, where, integer=kind == "integer")
            return _Node("slot", slot=self.add_slot(where or "value", choices))
        if kind == "null":
            return _Node("const", value=None)
        if kind == "string":
            raise self.fail(where, "free text (a string without an enum) cannot be chosen from a set")
        raise self.fail(where, f"type {kind!r} is not supported")

    def object_node(self, schema: dict[str, Any], where: str, depth: int) -> _Node:
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        if not isinstance(properties, dict):
            raise self.fail(where, "properties must be an object")
        fields = []
        for key, sub in properties.items():
            path = f"{where}.{key}" if where else key
            if key in required:
                fields.append((key, self.node(sub, path, depth + 1)))
                continue
            # Optional: chosen when it can be, else left out (leaving it out always validates).
            mark = len(self.slots)
            try:
                fields.append((key, self.node(sub, path, depth + 1)))
            except UnsupportedSchema:
                del self.slots[mark:]
        missing = required - set(properties)
        if missing:
            raise self.fail(where, f"required {sorted(missing)} without a schema")
        return _Node("object", fields=tuple(fields))

    def array_node(self, schema: dict[str, Any], where: str, depth: int) -> _Node:
        low = schema.get("minItems", 0)
        high = schema.get("maxItems", max(low, 1))
        if not (isinstance(low, int) and isinstance(high, int) and 0 <= low <= high):
            raise self.fail(where, "minItems/maxItems must be whole numbers with minItems <= maxItems")
        if low > MAX_ARRAY_ITEMS:
            raise self.fail(where, f"at least {low} items; the policy composes at most {MAX_ARRAY_ITEMS}")
        if schema.get("uniqueItems"):
            raise self.fail(where, "uniqueItems is not supported")
        high = min(high, MAX_ARRAY_ITEMS)
        length = self.add_slot(f"{where}#len", tuple(range(max(low, 1) if high else 0, high + 1)))
        items = tuple(self.node(schema.get("items") or {}, f"{where}[{i}]", depth + 1) for i in range(high))
        return _Node("array", slot=length, items=items, min_items=low)

    def range_choices(self, schema: dict[str, Any], where: str, *, integer: bool) -> tuple[Any, ...]:
        """A bounded integer's values (at most MAX_CHOICES, evenly spaced when wider) or a
        bounded number's NUMBER_POINTS points."""
        kind = "an integer" if integer else "a number"
        low, high = _bounds(schema, integer=integer)
        if low is None or high is None:
            raise self.fail(where, f"{kind} needs minimum and maximum to be chosen")
        if high < low:
            raise self.fail(where, f"an empty {kind.split()[1]} range")
        if not integer:
            return tuple(low + (high - low) * i / (NUMBER_POINTS - 1) for i in range(NUMBER_POINTS))
        if high - low < MAX_CHOICES:
            return tuple(range(low, high + 1))
        step = (high - low) / (MAX_CHOICES - 1)
        return tuple(sorted({low + round(i * step) for i in range(MAX_CHOICES)}))


def _bounds(schema: dict[str, Any], *, integer: bool) -> tuple[Any, Any]:
    """(minimum, maximum) with the exclusive forms folded in; None where unbounded."""
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(schema.get("exclusiveMinimum"), (int, float)):
        low = schema["exclusiveMinimum"] + (1 if integer else 1e-9)
    if isinstance(schema.get("exclusiveMaximum"), (int, float)):
        high = schema["exclusiveMaximum"] - (1 if integer else 1e-9)
    if integer:
        low = math.ceil(low) if isinstance(low, (int, float)) and not isinstance(low, bool) else None
        high = math.floor(high) if isinstance(high, (int, float)) and not isinstance(high, bool) else None
    elif not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low, high)):
        return None, None
    return low, high


def _build(node: _Node, values: Sequence[Any]) -> Any:
    if node.kind == "const":
        return node.value
    if node.kind == "slot":
        return values[node.slot]
    if node.kind == "object":
        return {key: _build(child, values) for key, child in node.fields}
    return [_build(child, values) for child in node.items[:values[node.slot]]]


def _collect(node: _Node, values: Sequence[Any], used: list[int]) -> None:
    if node.kind == "slot":
        used.append(node.slot)
    elif node.kind == "object":
        for _, child in node.fields:
            _collect(child, values, used)
    elif node.kind == "array":
        used.append(node.slot)
        for child in node.items[:values[node.slot]]:
            _collect(child, values, used)


# No tool offered: the answer is plain text, one of a few words (the gridworld's moves), so a
# text-parsing task app still gets something it can act on.
TEXT_ANSWER = ActionSpace("", (Slot("content", ("up", "down", "left", "right")),),
                          _Node("object", fields=(("content", _Node("slot", slot=0)),)))
