"""The request bodies and checked parameters of the embedded backend, as pydantic models.

FastAPI validates each body against its model before the route runs, the one
RequestValidationError handler (app/local/server/errors.py) names every problem in words (the
route's `Refusal`), and /openapi.json describes these models as they are: clients and the API
fuzzer in the tests read the same rules the backend applies.

The bounds are app.core.config.trainable's, the client's too: a number is checked by
`trainable.number_problem` with its `NumberBound`, and its JSON schema is built from the same
bound, so a config the client accepts is never refused here. The sections both sides model
([algorithm], [training], [evaluation]) are made from the client's schema (`section_body` of
app.core.config.schema's sections), not written again. So are the config's names
(app.core.config.known_keys): an unknown section, or a key that misspells a known one, is
refused with the name it meant; another key the backend does not read is allowed and not
typed. What JSON Schema cannot say (a string's length anywhere in the body, the products of
sizes, a misspelt key) is checked here too, and skipped by the fuzzer.
"""

from __future__ import annotations

from types import NoneType
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PlainValidator,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationInfo,
    WithJsonSchema,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from app.core.api.urls import MAX_URL_CHARS, http_url_problem
from app.core.api.wire import MAX_IDEMPOTENCY_KEY_CHARS
from app.core.config.known_keys import TOP_LEVEL_VALUES, known_keys, unknown_key_problems
from app.core.config.schema import AlgorithmSection, EvaluationSection, TrainingSection
from app.core.config.trainable import (
    INT64,
    LOSS_TYPES,
    MAX_EVAL_SEEDS,
    MAX_NAME_CHARS,
    MAX_OPS,
    MAX_TEXT_CHARS,
    NUMBER_BOUNDS,
    NumberBound,
    bound_at,
    is_int,
    number_problem,
    payload_problems,
    product_problems,
    short_repr,
)
from app.local.server.errors import Refusal, refused
from app.local.training.rollout_contract import CID_PREFIXES, parse_correlation_id
from app.local.training.rollout_record import DEFAULT_MAX_BYTES, DEFAULT_PER_STEP, MAX_MAX_BYTES, MAX_PER_STEP

MAX_CHAT_MESSAGES = 10_000


class _Open(BaseModel):
    """Keys not declared are allowed (and not read)."""

    model_config = ConfigDict(extra="allow")


def _missing() -> PydanticCustomError:
    return PydanticCustomError("missing", "Field required")


class Within:
    """A number within a NumberBound of app.core.config.trainable, checked by trainable.number_problem
    (the client's words); its JSON schema says the same bound. Null is left out when the
    annotation allows None (`int | None`), else refused as missing."""

    def __init__(self, bound: str | NumberBound) -> None:
        self.bound = bound_at(bound) if isinstance(bound, str) else bound

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        nullable = NoneType in get_args(source)

        def check(value: Any) -> Any:
            if value is None and not nullable:
                raise _missing()
            problem = number_problem(self.bound, value)
            if problem:
                raise refused(("", problem))
            return value

        return core_schema.no_info_plain_validator_function(check, metadata={_NULLABLE: nullable})

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        bound = self.bound
        number = {"type": "integer" if bound.integer else "number", "minimum": bound.low, "maximum": bound.high}
        return {"anyOf": [number, {"type": "null"}]} if schema.get("metadata", {}).get(_NULLABLE) else number


_NULLABLE = "synth_tui_nullable"


class AnyCase:
    """A string equal to `word` once lower-cased, as the backend compares the algorithm."""

    def __init__(self, word: str) -> None:
        self.word = word

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        def check(value: Any) -> str:
            if not (isinstance(value, str) and value.lower() == self.word):
                raise refused(("", f'must be "{self.word}" (in any case; got {short_repr(value)})'))
            return value

        return core_schema.no_info_plain_validator_function(check)

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        letters = "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in self.word)
        return {"type": "string", "pattern": f"^{letters}$"}


def _check_loss_type(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value.lower() in LOSS_TYPES):
        return value
    listed = ", ".join(f'"{word}"' for word in LOSS_TYPES)
    raise refused(("", f"must be one of {listed}, or left out for TRL's own default (got {short_repr(value)})"))


# [training] loss_type: the losses the embedded backend trains (docs/embedded-policy.md#the-objective).
LossType = Annotated[str | None, PlainValidator(_check_loss_type), WithJsonSchema(
    {"anyOf": [{"enum": list(LOSS_TYPES)}, {"type": "null"}]})]


def _check_task_url(value: Any) -> str:
    problem = http_url_problem(value)
    if problem or not isinstance(value, str):  # a URL that is not a string is a problem too
        raise refused(("", f"must be the task app's http(s) URL: {problem}"))
    return value


TaskUrl = Annotated[str, PlainValidator(_check_task_url), WithJsonSchema(
    {"type": "string", "format": "uri", "pattern": "^[hH][tT][tT][pP][sS]?://", "maxLength": MAX_URL_CHARS})]
# Not read as anything but a name: any value; a string at most a name long (payload_problems).
Name = Annotated[Any, Field(json_schema_extra={"maxLength": MAX_NAME_CHARS})]
# What Python counts as false: a key with one of these values is read as absent.
FALSY: dict[str, Any] = {"enum": [None, False, 0, "", [], {}]}


def _check_seeds(value: Any) -> list[int]:
    if not (isinstance(value, list) and value and all(is_int(s) for s in value)):
        raise refused(("", f"must be a non-empty list of integers (got {short_repr(value)})"))
    if len(value) > MAX_EVAL_SEEDS:
        raise refused(("", f"{len(value):,} seeds; at most {MAX_EVAL_SEEDS:,}"))
    if not all(-INT64 <= s <= INT64 for s in value):
        raise refused(("", "every seed must fit in 64 bits"))
    return value


Seeds = Annotated[list[int], PlainValidator(_check_seeds), WithJsonSchema(
    {"type": "array", "items": {"type": "integer", "minimum": -INT64, "maximum": INT64},
     "minItems": 1, "maxItems": MAX_EVAL_SEEDS})]


def _check_ops(value: Any) -> list[str] | None:
    if value is None:
        return None
    if not (isinstance(value, list) and all(isinstance(op, str) for op in value)):
        raise refused(("", f"must be a list of strings (got {short_repr(value)})"))
    if len(value) > MAX_OPS:
        raise refused(("", f"{len(value):,} ops; at most {MAX_OPS} (they repeat every turn)"))
    return value


Ops = Annotated[list[str] | None, PlainValidator(_check_ops), WithJsonSchema(
    {"anyOf": [{"type": "array", "maxItems": MAX_OPS, "items": {"type": "string", "maxLength": MAX_TEXT_CHARS}},
               {"type": "null"}]})]


class _OrFalsy:
    """In the JSON schema: this, or a value Python reads as false (then absent)."""

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"anyOf": [FALSY, handler(core_schema)]}


def _none_if_falsy(value: Any) -> Any:
    return value if value else None


# -- the job-creation body (docs/wire-contract.md#job-creation) -------------------------------------




class Rollout(_Open):
    """[rollout]: at least one key."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    max_turns: Annotated[int | None, Within("rollout.max_turns")] = None
    episodes_per_batch: Annotated[int | None, Within("rollout.episodes_per_batch")] = None
    max_concurrent_rollouts: Annotated[int | None, Within("rollout.max_concurrent_rollouts")] = None
    batches_per_step: Annotated[int | None, Within("rollout.batches_per_step")] = None
    timeout_s: Annotated[float | None, Within("rollout.timeout_s")] = None
    max_answer_bytes: Annotated[int | None, Within("rollout.max_answer_bytes")] = None
    env_name: Name = None
    policy_name: Name = None
    ops: Ops = None
    # What the inspector keeps (app/local/training/rollout_record.py).
    inspect_per_step: Annotated[int, Within(NumberBound("rollout.inspect_per_step", True, 0, MAX_PER_STEP))] = \
        DEFAULT_PER_STEP
    inspect_max_bytes: Annotated[int, Within(NumberBound("rollout.inspect_max_bytes", True, 0, MAX_MAX_BYTES))] = \
        DEFAULT_MAX_BYTES

    @model_validator(mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, dict) and not value:
            raise refused(("", "must not be empty ([rollout] env_name, policy_name, max_concurrent_rollouts, ...)"))
        return value


def section_body(section: type[BaseModel], name: str, **checked_otherwise: Any) -> type[_Open]:
    """The backend's model of a config section, made from the client's (app.core.config.schema):
    the same names, required or defaulted the same, each key with a NumberBound in
    app.core.config.trainable checked within it (`Within`), and `checked_otherwise` the keys
    the backend checks another way. The section's other keys are allowed and not typed, as
    every key the backend does not read (docs/wire-contract.md#config-schema)."""
    fields: dict[str, Any] = {}
    for key, info in section.model_fields.items():
        annotation = checked_otherwise.get(key)
        bound = next((b for b in NUMBER_BOUNDS if b.location == f"{name}.{key}"), None)
        if annotation is None and bound is not None:
            annotation = Annotated[info.annotation, Within(bound)]
        if annotation is not None:
            fields[key] = (annotation, ... if info.is_required() else info.default)
    model: type[_Open] = create_model(section.__name__.removesuffix("Section"), __base__=_Open,
                                      __module__=__name__, **fields)
    return model


class Algorithm(section_body(AlgorithmSection, "algorithm", type=Annotated[str, AnyCase("online")],  # type: ignore[misc]
                             method=Annotated[str, AnyCase("policy_gradient")],
                             variety=Annotated[str, AnyCase("gspo")])):
    """[algorithm]: the one algorithm the backend trains, its words in any case."""


# The job loop's switches: a boolean, never "yes" or 1 (docs/embedded-policy.md#async-generation).
Switch = StrictBool | None


class Training(section_body(TrainingSection, "training", loss_type=LossType, async_generation=Switch,  # type: ignore[misc]
                            importance_sampling_correction=Switch)):
    """[training]: the schema's keys within their bounds, and the products of its sizes."""

    @model_validator(mode="after")
    def _products_within_bounds(self) -> Training:
        sizes = {key: getattr(self, key) for key in
                 ("num_epochs", "iterations_per_epoch", "max_turns", "batch_size", "group_size")}
        problems = product_problems({"training": sizes})
        if problems:
            raise refused(*((p.location.removeprefix("training."), p.message) for p in problems))
        return self


class Evaluation(section_body(EvaluationSection, "evaluation", seeds=Seeds)):  # type: ignore[misc]
    """[evaluation]: the schema's instances and every_n_iters within their bounds, and its seeds."""


class Compute(_Open):
    gpu_count: Annotated[int | None, Within("compute.gpu_count")] = None
    nodes: Annotated[int | None, Within("compute.nodes")] = None


class PolicySection(_Open):
    max_tokens: Annotated[int | None, Within("policy.max_tokens")] = None
    max_prompt_tokens: Annotated[int | None, Within("policy.max_prompt_tokens")] = None
    temperature: Annotated[float | None, Within("policy.temperature")] = None
    top_p: Annotated[float | None, Within("policy.top_p")] = None


def _only_known_sections(schema: dict[str, Any]) -> None:
    """The JSON schema says what the check says of the top level: the known sections only
    (the undeclared ones as any value). A key that misspells a known one within a section is
    refused too, which JSON Schema cannot say."""
    properties = schema.setdefault("properties", {})
    for name in (*known_keys(), *TOP_LEVEL_VALUES):
        properties.setdefault(name, {})
    schema["additionalProperties"] = False


class RlConfig(_Open):
    """data.config: the training config, the TOML as an object."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_only_known_sections)

    algorithm: Algorithm
    rollout: Rollout
    training: Training
    # Left out, null or empty: no evaluation.
    evaluation: Annotated[Evaluation | None, BeforeValidator(_none_if_falsy), _OrFalsy()] = None
    compute: Compute | None = None
    policy: PolicySection | None = None

    @model_validator(mode="before")
    @classmethod
    def _known_names(cls, value: Any) -> Any:
        """Sections and keys by the client's rule (app.core.config.known_keys): a misspelt
        `[trainig]` is named with the name it meant, not reported as a missing [training]."""
        problems = unknown_key_problems(value)
        if problems:
            raise refused(*((p.location, p.message) for p in problems))
        return value


class JobData(_Open):
    endpoint_base_url: TaskUrl
    config: RlConfig
    # A name each: data.model when it is set (not false or empty), else data.base_model.
    base_model: Name = None
    model: Annotated[Name, Field(validate_default=True)] = None

    model_config = ConfigDict(json_schema_extra={"anyOf": [
        {"required": ["model"], "properties": {"model": {"type": "string", "pattern": "\\S"}}},
        {"required": ["base_model"], "properties": {"model": FALSY,
                                                    "base_model": {"type": "string", "pattern": "\\S"}}},
    ]})

    @field_validator("model", mode="after")
    @classmethod
    def _names_a_model(cls, value: Any, info: ValidationInfo) -> Any:
        chosen = value or info.data.get("base_model")
        if not (isinstance(chosen, str) and chosen.strip()):
            raise refused((None, "data.base_model or data.model is required: the model to train"))
        return value

    @property
    def model_name(self) -> str:
        return str(self.model or self.base_model).strip()


class JobCreate(_Open):
    """POST /api/rl/jobs. Before anything else, the whole body: no string longer than its bound
    anywhere (names 256 characters, other text 16,384), no NaN or infinity anywhere."""

    job_type: Literal["rl"]
    data: JobData

    @model_validator(mode="before")
    @classmethod
    def _sizes_anywhere(cls, value: Any) -> Any:
        problems = payload_problems(value)
        if problems:
            raise refused(*((p.location, p.message) for p in problems))
        return value


JOB_REFUSAL = Refusal("Invalid RL job payload", problem_words={
    "job_type": 'must be "rl"',
    "data": "must be an object with endpoint_base_url, config and base_model or model",
    "data.config": "must be the training config (the TOML as an object)",
    "data.config.algorithm": 'must be a table: [algorithm] type="online", method="policy_gradient", variety="gspo"',
    "data.config.rollout": "must be a table: [rollout] env_name, policy_name, max_concurrent_rollouts, ...",
    "data.config.training": "must be a table: [training] num_epochs, iterations_per_epoch, max_turns, batch_size, "
                            "group_size, learning_rate",
    "data.config.evaluation": "must be a table of instances, every_n_iters and seeds, or left out",
}, parameter_status=400)


# -- POST /api/rl/verify_task_app ------------------------------------------------------------------


class VerifyRequest(_Open):
    endpoint_base_url: TaskUrl


VERIFY_REFUSAL = Refusal("Invalid verification request", problem_words={})


# -- POST /api/rl/verify_model (docs/wire-contract.md#model-verification) ----------------------------


class VerifyModelRequest(_Open):
    """The model a config names, as the job payload will: its base (or model), its
    `chat_template` and `[training] learning_rate` when the config sets them."""

    model: Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME_CHARS, pattern=r"\S")]
    chat_template: Annotated[StrictStr | None, Field(max_length=MAX_TEXT_CHARS)] = None
    learning_rate: Annotated[float | None, Within("training.learning_rate")] = None
    trainer_mode: Annotated[StrictStr | None, Field(max_length=MAX_NAME_CHARS)] = None


VERIFY_MODEL_REFUSAL = Refusal("Invalid model check", problem_words={
    "model": f"must be the model to check: a Hugging Face id, or a folder or .gguf file where the backend runs "
             f"(a string of 1 to {MAX_NAME_CHARS} characters, not only spaces)",
    "chat_template": f"must be the name of a template TRL ships or the path of a .jinja file (at most "
                     f"{MAX_TEXT_CHARS:,} characters), or left out",
    "trainer_mode": f'must be the config\'s [model] trainer_mode ("full" or "lora", at most {MAX_NAME_CHARS} '
                    "characters), or left out",
})


# -- the chat endpoint (OpenAI's chat completions, as far as the policy reads them) ------------------


def _check_content(value: Any) -> Any:
    if not (value is None or isinstance(value, (str, list))):
        raise refused(("", "must be a string, a list of content parts or null"))
    return value


class ChatMessage(_Open):
    role: StrictStr
    content: Annotated[Any, PlainValidator(_check_content),
                       WithJsonSchema({"type": ["string", "array", "null"]})] = None


class ChatFunction(_Open):
    name: StrictStr
    parameters: dict[str, Any] | None = None


class ChatTool(_Open):
    """Its "type" is not read (OpenAI's is always "function")."""

    function: ChatFunction


class ChatRequest(_Open):
    """Only what the endpoint reads is checked; other keys are allowed, as OpenAI's API allows them."""

    model: StrictStr | None = None
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_CHAT_MESSAGES)
    tools: list[ChatTool] | None = None
    tool_choice: Any = None
    # Sampling and logprobs, as OpenAI's; the policy honours them or refuses saying why
    # (docs/wire-contract.md#the-chat-answer).
    temperature: Annotated[float | None, Field(ge=0, le=2, allow_inf_nan=False)] = None
    top_p: Annotated[float | None, Field(gt=0, le=1, allow_inf_nan=False)] = None
    max_tokens: Annotated[StrictInt | None, Field(ge=1)] = None
    max_completion_tokens: Annotated[StrictInt | None, Field(ge=1)] = None  # OpenAI's newer name (the SDK's)
    n: Annotated[StrictInt | None, Field(ge=1, le=1)] = None
    logprobs: StrictBool | None = None
    top_logprobs: Annotated[StrictInt | None, Field(ge=0, le=20)] = None


CHAT_REFUSAL = Refusal("Invalid chat completion request", problem_words={
    "messages": f"must be a non-empty list of at most {MAX_CHAT_MESSAGES:,} chat messages",
    "messages[]": "must be an object with a string role",
    "tools": "must be a list of tools",
    "tools[]": 'must be {"type": "function", "function": {"name": ...}}',
    "tools[].function": 'must be {"name": ...}',
    "tools[].function.parameters": "must be a JSON schema object",
    "model": "must be a string",
    "temperature": "must be a number from 0 to 2 (0: greedy)",
    "top_p": "must be a number above 0 and at most 1",
    "max_tokens": "must be a whole number of at least 1",
    "max_completion_tokens": "must be a whole number of at least 1",
    "n": ("must be 1: the embedded policy answers one choice per call (a rollout's episode is one sequence "
          "of turns; ask again for another sample)"),
    "logprobs": "must be true or false",
    "top_logprobs": "must be a whole number from 0 to 20",
    "cid": "is required: the inference URL must name the job (?cid=trace_<job_id>[:<rollout_id>])",
}, parameter_status=400)

# -- parameters ---------------------------------------------------------------------------------------

# A correlation id that names a job: after the prefix, if any, the job id up to ":" is not empty.
_NAMES_A_JOB = "^(?:(?:trace_|cid_|eval_)[^:]|(?!trace_|cid_|eval_)[^:])"
assert CID_PREFIXES == ("trace_", "cid_", "eval_")


def _check_cid(value: str) -> str:
    job_id, _ = parse_correlation_id(value)
    if not job_id:
        raise refused((None, "The inference URL must name the job: ?cid=trace_<job_id>[:<rollout_id>] or, in the "
                             "path, /v1/<job_id>/trace_<job_id>[:<rollout_id>]/chat/completions"))
    return value


Cid = Annotated[str, PlainValidator(_check_cid), WithJsonSchema({"type": "string", "pattern": _NAMES_A_JOB})]


def _check_idempotency_key(key: str | None) -> str | None:
    """The key is never quoted back."""
    if key is None:
        return None
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY_CHARS:
        raise refused((None, f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters "
                             f"(got {len(key):,}); a UUID is 36"))
    if not all(" " <= ch <= "~" for ch in key):
        raise refused((None, "Idempotency-Key must be printable ASCII (letters, digits, punctuation and spaces)"))
    return key


IdempotencyKey = Annotated[str | None, PlainValidator(_check_idempotency_key), WithJsonSchema(
    {"type": "string", "minLength": 1, "maxLength": MAX_IDEMPOTENCY_KEY_CHARS, "pattern": "^[ -~]+$"})]
