"""Tool schemas compiled to action spaces: what each construct becomes, what is refused and how
it is named, and (a property) that every argument the policy can build validates against the
tool's own schema."""

from __future__ import annotations

import random

import jsonschema
import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from app.local.policies.tabular.action_space import MAX_ARRAY_ITEMS, UnsupportedSchema, choose_tool, compile_tool
from app.local.policies.tabular.policy import TabularPolicy, choose, observation_features, state_key
from app.local.taskapps.crafter import INTERACT_MANY
from app.local.taskapps.gridworld_app import MOVE_TOOL
from support.tiers import examples


def tool(parameters: dict, name: str = "act") -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def test_an_array_of_enum_actions_is_a_length_and_one_slot_per_element():
    space = compile_tool(INTERACT_MANY)
    assert [s.name for s in space.slots] == ["actions#len", "actions[0]", "actions[1]", "actions[2]", "actions[3]"]
    assert space.slots[0].choices == (1, 2, 3, 4)
    arguments = space.build([1, 1, 4, 0, 0])  # length 2: collect_wood, make_pickaxe
    assert arguments == {"actions": ["collect_wood", "make_pickaxe"]}
    assert space.used_slots([1, 1, 4, 0, 0]) == [0, 1, 2]  # the elements past the length are not learned


def test_nested_objects_booleans_bounded_numbers_and_refs():
    schema = {
        "type": "object", "required": ["target", "run", "speed"],
        "properties": {
            "target": {"$ref": "#/$defs/Point"},
            "run": {"type": "boolean"},
            "speed": {"type": "number", "minimum": 0, "maximum": 2},
            "note": {"type": "string"},  # optional free text: left out, never an error
        },
        "$defs": {"Point": {"type": "object", "required": ["x", "mode"], "properties": {
            "x": {"type": "integer", "minimum": -2, "maximum": 2},
            "mode": {"type": "string", "enum": ["walk", "jump"]}}}},
    }
    space = compile_tool(tool(schema))
    assert {s.name: s.choices for s in space.slots} == {
        "target.x": (-2, -1, 0, 1, 2), "target.mode": ("walk", "jump"), "run": (False, True),
        "speed": (0.0, 0.5, 1.0, 1.5, 2.0)}
    assert space.build([4, 1, 1, 2]) == {"target": {"x": 2, "mode": "jump"}, "run": True, "speed": 1.0}


def test_a_long_array_is_composed_up_to_8_items():
    space = compile_tool(tool({"type": "object", "required": ["a"], "properties": {
        "a": {"type": "array", "items": {"enum": [1, 2]}, "minItems": 2, "maxItems": 100}}}))
    assert space.slots[0].choices == tuple(range(2, MAX_ARRAY_ITEMS + 1))


def test_a_wide_integer_range_is_sampled_at_most_64_points():
    space = compile_tool(tool({"type": "object", "required": ["n"],
                               "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 10_000}}}))
    choices = space.slots[0].choices
    assert len(choices) == 64 and choices[0] == 0 and choices[-1] == 10_000


@pytest.mark.parametrize("parameters,words", [
    ({"type": "object", "required": ["say"], "properties": {"say": {"type": "string"}}}, "say: free text"),
    ({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}, "n: an integer needs"),
    ({"type": "object", "required": ["x"], "properties": {"x": {"anyOf": [{"type": "integer"}]}}}, "'anyOf'"),
    ({"type": "object", "required": ["a"], "properties": {"a": {"type": "array", "minItems": 20,
                                                              "items": {"enum": [1]}}}}, "at least 20 items"),
    ({"type": "object", "required": ["r"], "properties": {"r": {"$ref": "https://x/y.json"}}}, "not a local"),
    ({"type": "object", "required": ["gone"], "properties": {}}, "without a schema"),
])
def test_what_cannot_be_chosen_is_refused_naming_the_tool_and_the_part(parameters, words):
    with pytest.raises(UnsupportedSchema) as info:
        compile_tool(tool(parameters, name="speak"))
    assert "tool 'speak'" in str(info.value) and words in str(info.value)


def test_tool_choice_is_honoured():
    first, second = tool({"type": "object"}, "first"), INTERACT_MANY
    assert choose_tool([first, second], None) is first
    assert choose_tool([first, second], "required") is first
    assert choose_tool([first, second], {"type": "function", "function": {"name": "interact_many"}}) is second
    assert choose_tool([first, second], "none") is None
    with pytest.raises(UnsupportedSchema, match="not among the tools"):
        choose_tool([first], {"type": "function", "function": {"name": "missing"}})


def test_the_gridworld_tool_still_answers_with_a_direction():
    space = compile_tool(MOVE_TOOL)
    arguments, decisions = choose(TabularPolicy(), "state: pos=0,0 goal=4,4 blocked=up,left", space, random.Random(1))
    assert arguments["direction"] in ("up", "down", "left", "right") and len(decisions) == 1
    assert decisions[0].prior_key is None  # the compact state line needs no shared row


def test_free_text_states_drop_counters_and_history():
    a = "Inventory: wood=1 stone=0\nStep 3/10\nRecent actions: noop, collect_wood"
    b = "Inventory: wood=1 stone=0\nStep 7/10\nRecent actions: sleep"
    assert state_key(a) == state_key(b) != state_key("Inventory: wood=2 stone=0\nStep 3/10")
    assert observation_features("at 2026-01-02T03:04:05Z id 123456 hp 7") == "at <time> id # hp 7"


# -- property: whatever the schema, what the policy builds is valid --------------------------------

LEAF = st.one_of(
    st.lists(st.one_of(st.integers(-5, 5), st.text(max_size=3), st.booleans()), min_size=1, max_size=5,
             unique_by=lambda v: (type(v), v)).map(lambda values: {"enum": values}),
    st.just({"type": "boolean"}),
    st.tuples(st.integers(-50, 50), st.integers(0, 200)).map(
        lambda t: {"type": "integer", "minimum": t[0], "maximum": t[0] + t[1]}),
    st.tuples(st.floats(-10, 10), st.floats(0, 10)).map(
        lambda t: {"type": "number", "minimum": t[0], "maximum": t[0] + t[1]}),
    st.just({"const": "fixed"}),
)


def _schemas(children):
    objects = st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), children, min_size=1, max_size=3).flatmap(
        lambda props: st.sets(st.sampled_from(sorted(props))).map(
            lambda required: {"type": "object", "properties": props, "required": sorted(required)}))
    arrays = st.tuples(children, st.integers(0, 2), st.integers(0, 3)).map(
        lambda t: {"type": "array", "items": t[0], "minItems": t[1], "maxItems": t[1] + t[2]})
    return st.one_of(objects, arrays)


SCHEMAS = st.recursive(LEAF, _schemas, max_leaves=8).map(
    lambda inner: {"type": "object", "properties": {"root": inner}, "required": ["root"]})


@settings(max_examples=examples(200), deadline=None)
@given(SCHEMAS, st.integers(0, 2**32))
def test_every_argument_the_policy_builds_validates_against_its_schema(schema, seed):
    try:
        space = compile_tool(tool(schema))
    except UnsupportedSchema as exc:  # only the size limit may refuse these schemas
        assert "choices per call" in str(exc)
        reject()
    # jsonschema.validate, with the schema checked once rather than for every argument.
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    rng = random.Random(seed)
    for _ in range(5):
        picks = [rng.randrange(len(slot.choices)) for slot in space.slots]
        validator.validate(space.build(picks))
