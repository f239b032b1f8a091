"""Tests for app.core.env.envfile: parsing, byte-preserving edits, atomic saves, discovery,
key resolution and masking. Real files in tmp dirs; the real home is never touched."""

from __future__ import annotations

import io
import json
import os
import stat
import tempfile
from pathlib import Path

import pytest
from dotenv import dotenv_values
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app.core.env import envfile
from app.core.env.discovery import demo_state_env_path, discover_env_files
from app.core.env.disk import disk_stamp
from app.core.env.envfile import EnvFile, write_demo_env
from app.core.env.keys import KEY_ALIASES, REQUIRED_KEYS, display_value, is_secret_key, mask_value, secret_parts
from app.core.env.resolve import ResolvedKey, missing_required, resolve_keys
from app.core.errors import EnvFileError
from support.tiers import examples

SECRET = "sk_live_TOPSECRET_0123456789"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(autouse=True)
def _fake_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SYNTH_AI_HOME", str(home / ".synth-ai"))
    return home


def oracle(text: str) -> dict:
    """What python-dotenv itself reads (no interpolation: values are literal, as in the SDK)."""
    return dict(dotenv_values(stream=io.StringIO(text), interpolate=False))


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


# --------------------------------------------------------------------------- masking


@pytest.mark.parametrize(
    ("value", "masked"),
    [
        (None, "<unset>"),
        ("", "<unset>"),
        ("a", "****"),
        ("abcdef", "****"),
        ("abcdefg", "abcd\u2026fg"),
        ("sk_live_abcdef12", "sk_l\u202612"),
    ],
)
def test_mask_value_matches_sdk(value, masked):
    assert mask_value(value) == masked


def test_display_value_shows_urls_and_masks_secrets():
    assert is_secret_key("SYNTH_API_KEY")
    assert not is_secret_key("TASK_APP_URL")
    assert not is_secret_key("task_app_base_url")
    assert not is_secret_key("WANDB_PROJECT")
    assert display_value("TASK_APP_URL", "https://x.modal.run") == "https://x.modal.run"
    assert display_value("SYNTH_API_KEY", "sk_live_abcdef12") == "sk_l\u202612"
    assert display_value("TASK_APP_URL", None) == "<unset>"
    assert display_value("TASK_APP_URL", "") == "<unset>"


SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASS", "AUTH", "CREDENTIAL", "PRIVATE")


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("WANDB_PROJECT", "crafter-qwen4b-rl", "crafter-qwen4b-rl"),  # not a secret: in full
        ("WANDB_ENTITY", "my_team", "my_team"),
        ("MODEL", "Qwen/Qwen3-4B-Instruct-2507", "Qwen/Qwen3-4B-Instruct-2507"),
        ("CHECKPOINT_DIR", "/data/run2024/checkpoints", "/data/run2024/checkpoints"),
        ("TASK_APP_URL", "https://abc123def456ghi789jkl.ngrok.app", "https://abc123def456ghi789jkl.ngrok.app"),
        ("OPENAI_API_KEY", "abc", "****"),  # a secret's name: masked, whatever the value
        ("DB_PASSWORD", "correct horse battery", "corr\u2026ry"),
        ("GITHUB_TOKEN", "hello", "****"),
        ("dev_environment_api_key", "lowercase_name_too", "lowe\u2026oo"),
        ("NOTES", "sk-proj-abcdef", "sk-p\u2026ef"),  # a value like a key, under any name
        ("COMMIT", "3f712812ab4c9d0e1f2a3b4c5d6e7f8091a2b3c4", "3f71\u2026c4"),
        ("BLOB", "aGVsbG8gd29ybGQgdGhpcyBpcyBhIHRlc3Q=", "aGVs\u2026Q="),
        ("DATABASE_URL", "postgres://bob:hunter2pass@db:5432/x", "postgres://****@db:5432/x"),
        ("HOOK_URL", "https://h.example/x?token=abc123&page=2", "https://h.example/x?token=****&page=2"),
    ],
)
def test_only_secrets_are_masked(name, value, shown):
    assert display_value(name, value) == shown


def test_secret_parts_are_what_messages_redact():
    assert secret_parts("WANDB_PROJECT", "crafter-rl") == []
    assert secret_parts("SYNTH_API_KEY", "x") == ["x"]
    assert secret_parts("DATABASE_URL", "postgres://bob:hunter2pass@db/x") == ["bob:hunter2pass"]


@settings(max_examples=examples(300), deadline=None)
@given(
    prefix=st.from_regex(r"[A-Za-z0-9_]{0,8}", fullmatch=True),
    word=st.sampled_from(SECRET_WORDS).flatmap(lambda w: st.sampled_from([w, w.lower(), w.title()])),
    suffix=st.from_regex(r"[A-Za-z0-9_]{0,8}", fullmatch=True),
    value=st.text(min_size=1, max_size=80),
)
def test_property_a_secret_named_value_never_shows_more_than_its_mask(prefix, word, suffix, value):
    name = prefix + word + suffix
    shown = display_value(name, value)
    assert shown == mask_value(value)
    assert shown == "****" or (shown == f"{value[:4]}\u2026{value[-2:]}" and len(value) > 6)
    assert secret_parts(name, value) == [value]


@settings(max_examples=examples(200), deadline=None)
@given(value=st.from_regex(r"(sk|pk|rk)[-_][A-Za-z0-9]{4,40}|ghp_[A-Za-z0-9]{20,36}|[A-Za-z0-9]{24,64}",
                           fullmatch=True))
def test_property_a_value_like_a_key_is_masked_under_any_name(value):
    if value.isalpha() or value.isdigit() or len(set(value)) < len(value) // 3:
        value = value + "Zq9x7Kd2Lm4Pw8Rt"  # one character class or repetitive: make it look random
    assert display_value("WANDB_PROJECT", value) == mask_value(value)


# --------------------------------------------------------------------------- load


def test_load_missing_file_is_empty_and_savable(tmp_path):
    env = EnvFile.load(tmp_path / ".env")
    assert not env.exists and env.keys() == [] and env.render() == "" and not env.dirty


def test_load_directory_is_a_clear_error(tmp_path):
    with pytest.raises(EnvFileError) as info:
        EnvFile.load(tmp_path)
    assert "directory" in info.value.message and info.value.hint


@pytest.mark.parametrize("data", [b"A=1\n\xff\xfeB=2\n", b"A=1\n\x00\x01\x02"])
def test_load_binary_or_undecodable_is_an_error(tmp_path, data):
    with pytest.raises(EnvFileError) as info:
        EnvFile.load(write(tmp_path / ".env", data))
    assert str(tmp_path / ".env") in info.value.message and info.value.hint


def test_load_unreadable_is_an_error(tmp_path, refuse_os_access):
    path = write(tmp_path / ".env", "A=1\n")
    refuse_os_access(path)  # as chmod 0 does for anyone but root (CI runs as root)
    with pytest.raises(EnvFileError, match="permission denied") as info:
        EnvFile.load(path)
    assert "chmod 600" in (info.value.hint or "")  # the user's own file


def test_an_unreadable_file_of_another_user_gets_no_chmod_advice(tmp_path, refuse_os_access, monkeypatch):
    """`--env-file /etc/shadow` advised `chmod 600 /etc/shadow` (issue 41 item 7)."""
    path = write(tmp_path / "shadow", "root:x\n")
    refuse_os_access(path)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(path).st_uid + 1)
    with pytest.raises(EnvFileError, match="permission denied; it belongs to another user") as info:
        EnvFile.load(path)
    assert "chmod" not in (info.value.hint or "") and "of your own" in (info.value.hint or "")


def test_load_junk_line_warns_without_value_and_keeps_good_lines(tmp_path):
    text = f"A=1\nSYNTH_API_KEY {SECRET}\nexport B='two'\n=nokey\nC=\"3\" # c\n"
    env = EnvFile.load(write(tmp_path / ".env", text))
    assert env.values == {"A": "1", "B": "two", "C": "3"} == oracle(text)
    assert [w.split(":")[0] for w in env.warnings] == ["line 2", "line 4"]
    assert all("could not parse" in w and SECRET not in w for w in env.warnings)
    assert env.render() == text


def test_load_parses_like_python_dotenv(tmp_path):
    text = (
        "\ufeff# top\r\n"
        "export A=plain value # comment\r\n"
        "B = 'single \\' quote'\n"
        'C="multi\nline"\n'
        "D=${HOME}\n"
        "E\n"
        "A=second\n"
    )
    env = EnvFile.load(write(tmp_path / ".env", text))
    assert env.values == oracle(text)
    assert env.get("A") == "second" and env.get("D") == "${HOME}" and env.get("E") is None
    assert env.keys() == ["A", "B", "C", "D", "E"]
    assert env.render() == text
    exports = {line.key: (line.export, line.quote) for line in env.lines if line.key}
    assert exports["B"] == (False, "'") and exports["C"] == (False, '"')


# --------------------------------------------------------------------------- set / unset


def test_set_keeps_export_quotes_comment_and_crlf(tmp_path):
    text = "# keys\r\nexport SYNTH_API_KEY='old' # prod\r\nOTHER=1\r\n"
    env = EnvFile.load(write(tmp_path / ".env", text))
    env.set("SYNTH_API_KEY", "new'val")
    assert env.render() == "# keys\r\nexport SYNTH_API_KEY='new\\'val' # prod\r\nOTHER=1\r\n"
    assert oracle(env.render())["SYNTH_API_KEY"] == "new'val"
    assert env.dirty


def test_set_edits_last_duplicate_only(tmp_path):
    text = "A=first\nB=2\nA=second\n"
    env = EnvFile.load(write(tmp_path / ".env", text))
    env.set("A", "third")
    assert env.render() == "A=first\nB=2\nA=third\n"


def test_set_same_value_changes_nothing(tmp_path):
    text = "export A = 'x'   # note\n"
    env = EnvFile.load(write(tmp_path / ".env", text))
    env.set("A", "x")
    assert env.render() == text and not env.dirty


def test_set_unquoted_value_that_needs_quotes_switches_to_double(tmp_path):
    env = EnvFile.load(write(tmp_path / ".env", "A=plain\n"))
    env.set("A", " spaced # not a comment ")
    assert env.render() == 'A=" spaced # not a comment "\n'
    assert oracle(env.render())["A"] == " spaced # not a comment "


def test_append_adds_newline_first_and_uses_file_line_endings(tmp_path):
    env = EnvFile.load(write(tmp_path / ".env", "A=1\r\nB=2"))
    env.set("TASK_APP_URL", "https://x.modal.run")
    env.set("SYNTH_API_KEY", 'has "quotes" and $')
    assert env.render() == (
        'A=1\r\nB=2\r\nTASK_APP_URL=https://x.modal.run\r\nSYNTH_API_KEY="has \\"quotes\\" and $"\r\n'
    )
    assert env.keys() == ["A", "B", "TASK_APP_URL", "SYNTH_API_KEY"]


def test_set_rejects_bad_new_key_without_echoing_it(tmp_path):
    env = EnvFile.load(tmp_path / ".env")
    for bad in ("", "1A", "A B", "A=B", SECRET + " x"):
        with pytest.raises(EnvFileError) as info:
            env.set(bad, "v")
        assert SECRET not in info.value.render()


def test_set_after_unclosed_quote_refuses_instead_of_corrupting(tmp_path):
    text = 'A="never closed\nB=plain\n'
    env = EnvFile.load(write(tmp_path / ".env", text))
    assert env.values == oracle(text) == {"B": "plain"}
    with pytest.raises(EnvFileError) as info:
        env.set("B", f'x"{SECRET}')
    assert "line 1" in info.value.message and SECRET not in info.value.render()
    assert env.render() == text
    env.set("B", "fine")  # a value without the quote char is still fine
    assert oracle(env.render()) == {"B": "fine"}


def test_unset_removes_every_line_of_the_key(tmp_path):
    text = "A=1\n# keep\nexport A='2'\nB=3\n"
    env = EnvFile.load(write(tmp_path / ".env", text))
    env.unset("A")
    env.unset("MISSING")
    assert env.render() == "# keep\nB=3\n" and env.keys() == ["B"]


# ---- properties

KEY_POOL = ["SYNTH_API_KEY", "ENVIRONMENT_API_KEY", "TASK_APP_URL", "A", "b_2", "export"]
_no_newline = st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp"))
_special = st.sampled_from(list("'\"#$\\ =\t{}`"))
line_text = st.text(st.one_of(_no_newline, _special), max_size=12)
new_values = st.text(st.one_of(_no_newline, _special), max_size=20)


@st.composite
def assignment(draw) -> str:
    export = draw(st.sampled_from(["", "export ", "export\t"]))
    key = draw(st.sampled_from(KEY_POOL))
    eq = draw(st.sampled_from(["=", " = ", "= ", "\t=\t"]))
    raw = draw(line_text)
    quote = draw(st.sampled_from(["", "'", '"']))
    if quote and draw(st.booleans()):  # half the time: properly escaped quoting
        raw = raw.replace("\\", "").replace(quote, "\\" + quote)
    comment = draw(st.sampled_from(["", " # note", "#tight", "  # sk_live_x"]))
    return f"{draw(st.sampled_from(['', '  ']))}{export}{key}{eq}{quote}{raw}{quote}{comment}"


env_line = st.one_of(
    assignment(),
    st.builds(lambda t: "#" + t, line_text),
    st.sampled_from(["", "   ", "\t"]),
    st.builds(lambda k, a, b: f'{k}="{a}\n{b}"', st.sampled_from(KEY_POOL), line_text, line_text),
    st.sampled_from(["this is junk", "=novalue", "'bad key", "A B C", 'X="unclosed', "X='unclosed"]),
)


@st.composite
def env_text(draw) -> str:
    lines = draw(st.lists(env_line, min_size=1, max_size=12))
    eols = [draw(st.sampled_from(["\n", "\r\n"])) for _ in lines]
    eols[-1] = draw(st.sampled_from(["\n", "\r\n", ""]))
    bom = draw(st.sampled_from(["", "", "", "\ufeff"]))
    return bom + "".join(line + eol for line, eol in zip(lines, eols, strict=True))


def test_a_key_quoted_across_lines_keeps_its_one_entry_when_set(tmp_path):
    """python-dotenv reads `'bad key\n#'` (no `=`) as a key with no value; setting it writes the
    same quoted key with the value, and nothing else changes (found by the property below)."""
    env = EnvFile.load(write(tmp_path / ".env", "A=1\n'bad key\n#'\nB=2\n"))
    assert env.keys() == ["A", "bad key\n#", "B"]
    env.set("bad key\n#", "")
    assert env.render() == "A=1\n'bad key\n#'=\nB=2\n"
    assert oracle(env.render()) == {"A": "1", "bad key\n#": "", "B": "2"}


def _blocked_by_unclosed_quote(env: EnvFile, before: str) -> bool:
    """set() may refuse only when an earlier unparsable line could swallow the new text."""
    return bool(env.warnings) and env.render() == before


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=env_text(), data=st.data(), value=new_values)
def test_property_set_changes_only_that_line(text, data, value):
    with tempfile.TemporaryDirectory() as tmp:
        path = write(Path(tmp) / ".env", text)
        env = EnvFile.load(path)
        assert env.render() == text and env.values == oracle(text)
        if not env.keys():
            event("no keys")
            return
        key = data.draw(st.sampled_from(env.keys()))
        lines = env.lines
        i = max(n for n, line in enumerate(lines) if line.key == key)
        bom = "\ufeff" if text.startswith("\ufeff") else ""
        prefix = bom + "".join(line.raw for line in lines[:i])
        suffix = "".join(line.raw for line in lines[i + 1 :])
        old = lines[i]
        try:
            env.set(key, value)
        except EnvFileError:
            event("refused: unclosed quote earlier")
            assert _blocked_by_unclosed_quote(env, text)
            return
        event(f"edited quote={old.quote!r} -> {env.lines[i].quote!r}")
        new = env.render()
        assert new.startswith(prefix) and new.endswith(suffix)
        new_line = new[len(prefix) : len(new) - len(suffix)]
        expected = oracle(text)
        expected[key] = value
        assert list(oracle(new).items()) == list(expected.items())
        assert env.values == expected
        edited = env.lines[i]
        assert edited.key == key and edited.export == old.export
        if old.quote:
            assert edited.quote == old.quote
        ending = "\r\n" if old.raw.endswith("\r\n") else "\n" if old.raw.endswith("\n") else ""
        # one line, unless its key is quoted across lines (python-dotenv reads `'a\n#'` as a key)
        assert new_line.endswith(ending) and new_line.count("\n") == ending.count("\n") + key.count("\n")
        if value != oracle(text)[key]:
            env.save()
            assert path.read_bytes() == new.encode("utf-8")
            assert not env.dirty and EnvFile.load(path).values == expected


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=env_text(),
    key=st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
    value=new_values,
)
def test_property_append_missing_key(text, key, value):
    with tempfile.TemporaryDirectory() as tmp:
        env = EnvFile.load(write(Path(tmp) / ".env", text))
        if key in env.keys():
            event("key already present")
            return
        try:
            env.set(key, value)
        except EnvFileError:
            event("refused: unclosed quote earlier")
            assert _blocked_by_unclosed_quote(env, text)
            return
        new = env.render()
        body = text.removeprefix("\ufeff")
        if body and not body.endswith(("\n", "\r")):
            assert new.startswith(text) and new[len(text)] in "\r\n"
        else:
            assert new.startswith(text)
        added = new[len(text) :].lstrip("\r\n") if not text.endswith(("\n", "\r")) else new[len(text) :]
        assert added.startswith(key + "=") and added.endswith("\n") and added.count("\n") == 1
        expected = oracle(text)
        expected[key] = value
        assert list(oracle(new).items()) == list(expected.items())
        assert env.keys()[-1] == key


# --------------------------------------------------------------------------- save


def test_save_keeps_mode_of_existing_file(tmp_path):
    path = write(tmp_path / ".env", "A=1\n")
    path.chmod(0o640)
    env = EnvFile.load(path)
    env.set("A", "2")
    env.save()
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.read_text() == "A=2\n" and not env.dirty


def test_save_new_file_is_0600(tmp_path):
    path = tmp_path / "sub.env"
    env = EnvFile.load(path)
    env.set("SYNTH_API_KEY", SECRET)
    env.save()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert EnvFile.load(path).values == {"SYNTH_API_KEY": SECRET}
    assert env.exists and not env.dirty


def test_save_failure_leaves_original_and_no_temp(tmp_path, monkeypatch):
    original = f"# c\nexport SYNTH_API_KEY='{SECRET}'\n"
    path = write(tmp_path / ".env", original)
    env = EnvFile.load(path)
    env.set("SYNTH_API_KEY", SECRET + "_new")

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(envfile.os, "replace", boom)
    with pytest.raises(EnvFileError) as info:
        env.save()
    assert info.value.message == f"Cannot save {path}: No space left on device"
    assert info.value.hint and SECRET not in info.value.render()
    assert path.read_text() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == [".env"]
    assert env.dirty  # the edit is still there to retry


def test_save_failure_during_write_leaves_no_temp(tmp_path, monkeypatch):
    path = write(tmp_path / ".env", "A=1\n")
    env = EnvFile.load(path)
    env.set("A", "2")
    monkeypatch.setattr(envfile.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(5, "I/O error")))
    with pytest.raises(EnvFileError, match="I/O error"):
        env.save()
    assert path.read_text() == "A=1\n" and sorted(p.name for p in tmp_path.iterdir()) == [".env"]


def test_save_into_missing_or_non_directory_is_an_error(tmp_path):
    for path in (tmp_path / "nope" / ".env", write(tmp_path / "file", "x") / ".env"):
        env = EnvFile.load(path) if path.parent.name == "nope" else EnvFile(path)
        env.set("A", "1")
        with pytest.raises(EnvFileError, match="Cannot save"):
            env.save()


def test_save_into_read_only_directory_is_an_error(tmp_path, refuse_os_access):
    path = write(tmp_path / ".env", "A=1\n")
    env = EnvFile.load(path)
    env.set("A", "2")
    refuse_os_access(tmp_path, creating=True)  # as a read-only folder does for anyone but root
    with pytest.raises(EnvFileError, match="Permission denied"):
        env.save()
    assert path.read_text() == "A=1\n" and sorted(p.name for p in tmp_path.iterdir()) == [".env"]


def test_save_follows_symlink_to_target(tmp_path):
    target = write(tmp_path / "real.env", "A=1\n")
    link = tmp_path / ".env"
    link.symlink_to(target)
    env = EnvFile.load(link)
    env.set("A", "2")
    env.save()
    assert link.is_symlink() and target.read_text() == "A=2\n"


def test_save_refuses_to_clobber_changes_on_disk(tmp_path):
    path = write(tmp_path / ".env", "A=1\n")
    env = EnvFile.load(path)
    env.set("A", "2")
    path.write_text("A=1\nB=edited elsewhere\n")
    with pytest.raises(EnvFileError, match="changed on disk"):
        env.save()
    env.save(force=True)
    assert path.read_text() == "A=2\n"


def _bump_mtime(path: Path) -> None:
    """Move the file's mtime on by a second: a rewrite within the clock's tick keeps it."""
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))


def test_changed_on_disk_notices_another_text_and_ignores_a_touch(tmp_path):
    path = write(tmp_path / ".env", "TASK_APP_URL=http://old.example\n")
    env = EnvFile.load(path)
    assert env.stamp == disk_stamp(path)
    assert not env.changed_on_disk() and not env.changed_on_disk(thorough=True)

    _bump_mtime(path)  # touched, same text: no change, and the new stamp is kept
    assert not env.changed_on_disk()
    assert env.stamp == disk_stamp(path)

    path.write_text("TASK_APP_URL=http://new.example\n")
    _bump_mtime(path)
    assert env.changed_on_disk()
    assert env.changed_on_disk()  # it stays changed until the file is read again
    assert not EnvFile.load(path).changed_on_disk()


def test_changed_on_disk_thorough_reads_even_when_the_stamp_is_the_same(tmp_path):
    path = write(tmp_path / ".env", "A=1\n")
    env = EnvFile.load(path)
    before = path.stat()
    path.write_text("A=2\n")  # same size; put the old mtime back: a stat cannot tell
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert disk_stamp(path) == env.stamp
    assert not env.changed_on_disk()
    assert env.changed_on_disk(thorough=True)


def test_changed_on_disk_created_removed_and_unreadable(tmp_path):
    path = tmp_path / ".env"
    env = EnvFile.load(path)  # no file yet
    assert env.stamp is None and not env.changed_on_disk()
    path.write_text("A=1\n")
    assert env.changed_on_disk()  # created by another program

    loaded = EnvFile.load(path)
    path.unlink()
    assert loaded.changed_on_disk()  # removed
    path.mkdir()
    assert loaded.changed_on_disk(thorough=True)  # not a file any more: an error is a change


def test_our_own_save_is_not_a_change_on_disk(tmp_path):
    path = write(tmp_path / ".env", "A=1\n")
    env = EnvFile.load(path)
    env.set("A", "22")
    env.save()
    assert env.stamp == disk_stamp(path)  # taken from the written file itself
    assert not env.changed_on_disk() and not env.changed_on_disk(thorough=True)


def test_write_demo_env_creates_0600_and_refuses_existing(tmp_path):
    path = tmp_path / "demo" / ".env"
    path.parent.mkdir()
    write_demo_env(path, {"SYNTH_API_KEY": SECRET, "TASK_APP_URL": "http://127.0.0.1:8001"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert oracle(path.read_text()) == {"SYNTH_API_KEY": SECRET, "TASK_APP_URL": "http://127.0.0.1:8001"}
    before = path.read_bytes()
    with pytest.raises(EnvFileError, match="already exists") as info:
        write_demo_env(path, {"SYNTH_API_KEY": "other"})
    assert path.read_bytes() == before and SECRET not in info.value.render()
    assert sorted(p.name for p in path.parent.iterdir()) == [".env"]


# --------------------------------------------------------------------------- resolution


def _env(tmp_path, text) -> EnvFile:
    return EnvFile.load(write(tmp_path / ".env", text))


def _by_name(resolved) -> dict[str, ResolvedKey]:
    return {r.name: r for r in resolved}


def test_resolve_shell_wins_over_file_and_flag_wins_over_all(tmp_path):
    text = "SYNTH_API_KEY=file_value_1\nENVIRONMENT_API_KEY=same_value\nTASK_APP_URL=http://file\n"
    env = _env(tmp_path, text)
    shell = {
        "SYNTH_API_KEY": "shell_value_2",
        "ENVIRONMENT_API_KEY": "same_value",
        "TASK_APP_URL": "http://shell",
    }
    got = _by_name(resolve_keys(env, shell=shell, flags={"TASK_APP_URL": "http://flag"}))
    assert (got["SYNTH_API_KEY"].value, got["SYNTH_API_KEY"].source) == ("shell_value_2", "shell")
    assert got["SYNTH_API_KEY"].shell_overrides_file
    same = got["ENVIRONMENT_API_KEY"]
    assert same.source == "shell" and not same.shell_overrides_file
    url = got["TASK_APP_URL"]
    assert (url.value, url.source, url.origin) == ("http://flag", "flag", "--task-url")
    assert url.display == "http://flag"


def test_resolve_file_and_aliases_with_origin(tmp_path):
    text = "SYNTH_API_KEY=from_file_123\ndev_environment_api_key=dev_lower_1\nTASK_APP_BASE_URL=http://base\n"
    env = _env(tmp_path, text)
    got = _by_name(resolve_keys(env, shell={}))
    assert (got["SYNTH_API_KEY"].source, got["SYNTH_API_KEY"].origin) == ("file", str(env.path))
    assert (got["ENVIRONMENT_API_KEY"].value, got["ENVIRONMENT_API_KEY"].source) == ("dev_lower_1", "alias")
    assert got["ENVIRONMENT_API_KEY"].origin == "dev_environment_api_key"
    assert (got["TASK_APP_URL"].value, got["TASK_APP_URL"].origin) == ("http://base", "TASK_APP_BASE_URL")
    # a shell alias beats a file alias, but not the file's own key
    got = _by_name(resolve_keys(env, shell={"DEV_ENVIRONMENT_API_KEY": "dev_shell_1"}))
    alias = got["ENVIRONMENT_API_KEY"]
    assert (alias.value, alias.origin) == ("dev_shell_1", "DEV_ENVIRONMENT_API_KEY")
    env.set("ENVIRONMENT_API_KEY", "real_file_key")
    got = _by_name(resolve_keys(env, shell={"DEV_ENVIRONMENT_API_KEY": "dev_shell_1"}))
    assert got["ENVIRONMENT_API_KEY"].source == "file"
    assert KEY_ALIASES["ENVIRONMENT_API_KEY"][0] == "DEV_ENVIRONMENT_API_KEY"


def test_resolve_empty_counts_as_missing_and_extra_keys_follow(tmp_path):
    env = _env(tmp_path, "OPENAI_API_KEY=sk-openai-123\nSYNTH_API_KEY=\nZED\nTASK_APP_URL=http://f\n")
    resolved = resolve_keys(env, shell={"SYNTH_API_KEY": "", "ENVIRONMENT_API_KEY": ""})
    assert [r.name for r in resolved] == [*REQUIRED_KEYS, "OPENAI_API_KEY", "ZED"]
    got = _by_name(resolved)
    assert got["SYNTH_API_KEY"].source == "missing" and got["SYNTH_API_KEY"].value is None
    assert got["SYNTH_API_KEY"].display == "<unset>"
    assert got["OPENAI_API_KEY"].required is False and got["OPENAI_API_KEY"].source == "file"
    assert missing_required(resolved) == ["SYNTH_API_KEY", "ENVIRONMENT_API_KEY"]
    resolved = resolve_keys(None, shell={"SYNTH_API_KEY": "x", "ENVIRONMENT_API_KEY": "y"})
    assert missing_required(resolved) == ["TASK_APP_URL"]
    assert missing_required(resolved, optional=("TASK_APP_URL",)) == []


# --------------------------------------------------------------------------- discovery


def test_discover_order_skipping_and_dedupe(tmp_path):
    cwd = tmp_path / "proj"
    skipped = (".venv/.env", "node_modules/x/.env", ".git/.env", "__pycache__/.env")
    for rel in (".env", "a/.env", "b/c/.env", *skipped):
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        (cwd / rel).write_text("A=1\n")
    (cwd / "d" / ".env").mkdir(parents=True)  # a directory named .env is not a candidate
    cfg_dir = tmp_path / "configs"
    cfg_dir.mkdir()
    write(cfg_dir / ".env", "B=1\n")
    extra = tmp_path / "extra"
    extra.mkdir()
    write(extra / ".env", "C=1\n")
    roots = [extra, cwd, tmp_path / "none"]
    got = discover_env_files(cwd, config_path=cfg_dir / "rl.toml", extra_roots=roots)
    assert got == [cwd / ".env", cwd / "a/.env", cwd / "b/c/.env", cfg_dir / ".env", extra / ".env"]
    assert discover_env_files(cwd, config_path=cwd / "rl.toml") == got[:3]


def test_discover_limit(tmp_path):
    for i in range(6):
        (tmp_path / f"d{i}").mkdir()
        write(tmp_path / f"d{i}" / ".env", "A=1\n")
    assert len(discover_env_files(tmp_path, limit=3)) == 3
    assert discover_env_files(tmp_path / "missing") == []


def test_demo_state_env_path(tmp_path, _fake_home):
    state = _fake_home / ".synth-ai"
    assert demo_state_env_path() is None
    state.mkdir()
    env = write(tmp_path / "demo.env", "A=1\n")
    (state / "demo.json").write_text(json.dumps({"ENV_FILE_PATH": str(env), "OTHER": 1}))
    assert demo_state_env_path() == env
    assert demo_state_env_path(tmp_path) is None
    (state / "demo.json").write_text(json.dumps({"ENV_FILE_PATH": str(tmp_path / "gone.env")}))
    assert demo_state_env_path() is None
    (state / "demo.json").write_text("{not json")
    assert demo_state_env_path() is None


# --------------------------------------------------------------------------- secrecy


def test_no_repr_error_or_warning_shows_a_full_secret(tmp_path, monkeypatch):
    text = f"SYNTH_API_KEY={SECRET}\nENVIRONMENT_API_KEY '{SECRET}'\n"
    env = _env(tmp_path, text)
    texts = [repr(env), str(env), *map(repr, env.lines), *env.warnings]
    resolved = resolve_keys(env, shell={"ENVIRONMENT_API_KEY": SECRET})
    texts += [repr(r) for r in resolved] + [str(r) for r in resolved] + [repr(resolved)]
    monkeypatch.setattr(envfile.os, "replace", lambda *a: (_ for _ in ()).throw(OSError(SECRET[:3])))
    env.set("SYNTH_API_KEY", SECRET + "2")
    with pytest.raises(EnvFileError) as info:
        env.save()
    texts.append(info.value.render())
    assert texts and all(SECRET not in t for t in texts)
    assert "sk_l\u202689" in repr(resolved[0])
