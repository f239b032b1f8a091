"""The policies the embedded backend can train, behind one seam (base.Policy).

`tabular` is the stand-in (tabular.py). The trainer and the chat endpoint reach a policy only
through `create` and `load` here and the methods of base.Policy. docs/embedded-policy.md.
"""

from __future__ import annotations

from pathlib import Path

from app.local.policies.base import Policy, PolicySettings, read_manifest
from app.local.policies.tabular import TabularPolicy

DEFAULT_POLICY = "tabular"
_KINDS: dict[str, type[TabularPolicy]] = {TabularPolicy.kind: TabularPolicy}


def create(kind: str, settings: PolicySettings) -> Policy:
    try:
        return _KINDS[kind](settings=settings)
    except KeyError:
        raise ValueError(f"unknown policy {kind!r}; known: {', '.join(sorted(_KINDS))}") from None


def load(folder: Path, settings: PolicySettings) -> Policy:
    """The policy saved in `folder` (its manifest names the kind)."""
    policy = create(read_manifest(folder)["kind"], settings)
    policy.load(folder)
    return policy
