"""The backend's config sections are made from the client's schema (app/core/config/schema.py),
with the bounds of app/core/config/trainable.py: one definition of each section's names, its
required keys and its bounds, so a config the client accepts is never refused for a name."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from app.core.config.schema import AlgorithmSection, EvaluationSection, TrainingSection
from app.core.config.trainable import NUMBER_BOUNDS, number_problem
from app.local.server.bodies import Algorithm, Evaluation, Training, section_body


@pytest.mark.parametrize(("body", "section", "name"), [
    (Training, TrainingSection, "training"), (Evaluation, EvaluationSection, "evaluation"),
    (Algorithm, AlgorithmSection, "algorithm")])
def test_each_body_section_is_its_schema_section(body: type[BaseModel], section: type[BaseModel], name: str) -> None:
    shared = section.model_fields
    bounded = {b.location.partition(".")[2] for b in NUMBER_BOUNDS if b.location.startswith(f"{name}.")}
    assert bounded <= set(body.model_fields) <= set(shared)
    for key, field in body.model_fields.items():
        assert field.is_required() == shared[key].is_required(), key
    properties = body.model_json_schema()["properties"]
    for bound in NUMBER_BOUNDS:
        if bound.location.startswith(f"{name}."):
            schema = properties[bound.location.partition(".")[2]]
            number = next(s for s in schema.get("anyOf", [schema]) if "minimum" in s)
            assert (number["minimum"], number["maximum"]) == (bound.low, bound.high)


class _TrainingSection(BaseModel):
    num_epochs: int
    kl_coef: float | None = None
    note: str | None = None


def test_a_key_added_to_the_schema_is_checked_by_the_backend_within_its_bound() -> None:
    body = section_body(_TrainingSection, "training")
    assert list(body.model_fields) == ["num_epochs", "kl_coef"]  # `note` has no bound: not typed here
    assert body.model_validate({"num_epochs": 3, "note": 5}).model_dump() == {"num_epochs": 3, "kl_coef": None,
                                                                              "note": 5}
    bound = next(b for b in NUMBER_BOUNDS if b.location == "training.num_epochs")
    with pytest.raises(ValidationError) as refused:
        body.model_validate({"num_epochs": 0})
    assert number_problem(bound, 0) in str(refused.value)  # the client's words
    with pytest.raises(ValidationError, match="Field required"):
        body.model_validate({"kl_coef": 0.1})
