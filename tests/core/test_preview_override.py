"""The payload preview's Task URL override, as the session names it: the preview's, never the
--task-url flag's (docs/product.md#payload-preview), in the keys and in a refused URL's message."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.core.errors import UsageError
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "configs" / "rl" / "crafter_qwen4b.toml"


def task_url_key(session: LaunchSession):
    return next(k for k in session.resolved if k.name == "TASK_APP_URL")


def session_with_config(tmp_path: Path, **options) -> LaunchSession:
    config = tmp_path / "crafter.toml"
    shutil.copy(EXAMPLE, config)
    env = tmp_path / ".env"
    env.write_text("SYNTH_API_KEY=sk_test_0123456789\nENVIRONMENT_API_KEY=env_key_0123456789abcdef\n"
                   "TASK_APP_URL=http://127.0.0.1:8001\n")
    session = LaunchSession(LaunchOptions(cwd=tmp_path, **options), shell={})
    session.choose_config(config, session.validate(config))
    session.open_env(env)
    return session


@pytest.mark.parametrize("flag", [None, "http://127.0.0.1:8002"])
def test_a_task_url_typed_in_the_preview_is_the_previews(flag):
    session = LaunchSession(LaunchOptions(task_url=flag), shell={})
    session.resolve()
    if flag:
        assert (task_url_key(session).source, task_url_key(session).origin) == ("flag", "--task-url")
    session.override(task_url="http://127.0.0.1:9999")
    key = task_url_key(session)
    assert (key.value, key.source, key.origin) == ("http://127.0.0.1:9999", "preview", "the payload preview")
    assert key.where == "the payload preview's override"
    session.override(task_url=flag)  # back to what the flags said
    assert task_url_key(session).source == ("flag" if flag else "missing")


def test_a_refused_preview_url_is_named_as_the_previews_not_the_flags(tmp_path):
    session = session_with_config(tmp_path)
    session.override(task_url="127.0.0.1:9999")  # no scheme
    with pytest.raises(UsageError) as refused:
        session.prepare()
    assert refused.value.message.startswith("The preview's Task URL is not a usable task app URL")
    assert "--task-url" not in refused.value.message
