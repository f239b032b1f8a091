"""The env review: masked values and their sources, in-memory edits, explicit saves, switching
files, and continuing only when every required key has a value. No secret is ever shown."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from textual.widgets import Button, Input, Static

from app.core.env import envfile
from app.core.env.resolve import ResolvedKey
from app.screens.commands import palette_commands
from app.screens.config_picker import ConfigPickerScreen
from app.screens.dialogs.common import ConfirmDialog, ErrorDialog
from app.screens.dialogs.env import AddKeyDialog, EditValueDialog, ReloadDialog, SaveBeforeContinueDialog
from app.screens.dialogs.path_prompt import PathPromptDialog
from app.screens.env_review import EnvReviewScreen
from support.pilot_waits import type_ahead, wait_for, wait_for_screen, wait_until
from support.screen_text import footer_keys_missing, footer_text, notifications
from widgets.env_table import MaskedEnvTable, describe

# Long fake secrets: any of them in full on screen is a leak.
SYNTH_KEY = "sk_live_FAKE_0123456789abcdefghijklmnopqrstuv"
ENV_KEY = "envk_FAKE_zyxwvutsrqponmlkjihgfedcba987654"
SHELL_KEY = "sk_shell_FAKE_ABCDEFGHIJKLMNOPQRSTUVWXYZ0123"
ALIAS_KEY = "dev_envk_FAKE_9f8e7d6c5b4a39281706f5e4d3c2"
NEW_KEY = "sk_new_FAKE_mnbvcxzlkjhgfdsapoiuytrewq5678"
OTHER_TOKEN = "tok_FAKE_qwertyuiopasdfghjkl1234567890"
SECRETS = (SYNTH_KEY, ENV_KEY, SHELL_KEY, ALIAS_KEY, NEW_KEY, OTHER_TOKEN)
TASK_URL = "https://example--task-app.modal.run"

# Comments, export, quotes, a blank line and an unparsable line: all must survive a save.
FULL_ENV = (
    "# synth secrets\n"
    f"SYNTH_API_KEY={SYNTH_KEY}\n"
    "\n"
    f"export ENVIRONMENT_API_KEY=\"{ENV_KEY}\"  # from the task app\n"
    f"TASK_APP_URL='{TASK_URL}'\n"
    f"OTHER_TOKEN={OTHER_TOKEN}\n"
    "this line is not an assignment\n"
)


# Discovery would also search the checkout's own configs/ folder; these tests look at the project.
pytestmark = pytest.mark.usefixtures("project_configs_only")


@pytest.fixture
def verification_calls(monkeypatch):
    """The verification screen is built elsewhere; record that the flow went there."""
    from app.tui import SynthTuiApp

    calls: list[str] = []
    monkeypatch.setattr(SynthTuiApp, "go_to_verification", lambda self: calls.append("verify"))
    return calls


async def env_screen(pilot) -> EnvReviewScreen:
    await wait_for_screen(pilot, EnvReviewScreen, "the env screen")
    screen = pilot.app.screen
    await wait_until(pilot, lambda: not screen.loading, "the .env to load")
    await pilot.pause()
    return screen


def row(screen: EnvReviewScreen, key: str) -> list[str]:
    return [str(cell) for cell in screen.query_one(MaskedEnvTable).get_row(key)]


def text_of(screen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


def notice_lines(app) -> list[str]:
    return [f"{n.title}: {n.message}" for n in notifications(app)]


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


async def select_row(pilot, screen: EnvReviewScreen, key: str) -> None:
    screen.query_one(MaskedEnvTable).select_key(key)
    await pilot.pause()


async def edit_selected(pilot, screen: EnvReviewScreen, value: str) -> None:
    """Edit the selected row: enter opens the dialog, the value replaces the old one, enter
    applies it; returns once the dialog has closed."""
    await pilot.press("enter")
    pilot.app.screen.query_one("#env-value", Input).value = value
    await pilot.press("enter")
    await wait_until(pilot, lambda: pilot.app.screen is screen, "the dialog to close")


# --------------------------------------------------------------------------- what is shown


async def test_values_are_masked_sources_shown_r_in_the_footer_and_home_end_move_the_cursor(make_app, project):
    """Three tests once, on the same app: what the full .env shows (masks, sources, order, header,
    status, warnings), the reload key in the footer (was test_the_footer_shows_the_reload_key),
    then home and end (was test_home_and_end_move_the_cursor_to_the_first_and_last_key)."""
    (project / ".env").write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        assert row(screen, "SYNTH_API_KEY") == ["SYNTH_API_KEY", "sk_l…uv", "file", ""]
        assert row(screen, "ENVIRONMENT_API_KEY") == ["ENVIRONMENT_API_KEY", "envk…54", "file", ""]
        assert row(screen, "TASK_APP_URL") == ["TASK_APP_URL", TASK_URL, "file", ""]  # URLs in full
        assert row(screen, "OTHER_TOKEN") == ["OTHER_TOKEN", "tok_…90", "file", ""]
        keys = [str(r.key.value) for r in screen.query_one(MaskedEnvTable).ordered_rows]
        assert keys == ["SYNTH_API_KEY", "ENVIRONMENT_API_KEY", "TASK_APP_URL", "OTHER_TOKEN"]
        assert "Env file .env  (found in the project · e to switch)" in text_of(screen, "#env-header")
        assert "✓ Every required key has a value" in text_of(screen, "#env-status")
        assert "line 7: could not parse this line" in text_of(screen, "#env-warnings")
        assert_no_secret(app.export_screenshot())

        reload = next(b for b in EnvReviewScreen.BINDINGS if b.action == "reload")
        assert reload.show and reload.id == "env.reload" and reload.description
        await pilot.pause()
        footer_keys = {(key.key_display, key.description) for key in screen.query("FooterKey")}
        assert ("r", "Reload") in footer_keys

        table = screen.query_one(MaskedEnvTable)
        await pilot.press("end")
        assert table.selected_key == "OTHER_TOKEN"
        assert "OTHER_TOKEN = tok_…90" in text_of(screen, "#env-detail")
        await pilot.press("home")
        assert table.selected_key == "SYNTH_API_KEY"


async def test_a_url_with_credentials_is_named_before_verification(make_app, project):
    """Verification refuses a TASK_APP_URL with user:pass@; the review says so first, and
    shows the URL with its credentials hidden."""
    url = f"https://someone:{OTHER_TOKEN}@example--task-app.modal.run"
    (project / ".env").write_text(FULL_ENV.replace(f"TASK_APP_URL='{TASK_URL}'", f"TASK_APP_URL='{url}'"))
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        status = text_of(screen, "#env-status")
        assert "✗ A user name or password in TASK_APP_URL" in status and "✓" not in status
        assert row(screen, "TASK_APP_URL")[1] == "https://****@example--task-app.modal.run"
        assert_no_secret(app.export_screenshot())


async def test_a_key_no_header_can_carry_is_named_and_stops_continue(make_app, project):
    """A key with a space passed the review ("✓ Every required key has a value") and failed at
    the payload; the review names it (never its value) and c stays here (a newcomer's walk)."""
    spaced = SYNTH_KEY[:7] + " " + SYNTH_KEY[7:]
    (project / ".env").write_text(FULL_ENV.replace(f"SYNTH_API_KEY={SYNTH_KEY}", f"SYNTH_API_KEY='{spaced}'"))
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        status = text_of(screen, "#env-status")
        assert f"✗ Cannot be sent: SYNTH_API_KEY: character 8 of {len(spaced)} is a space" in status
        assert "✓" not in status
        await pilot.press("c")
        await wait_for(pilot, lambda: notifications(app))
        assert app.screen is screen and "Cannot continue yet" in notifications(app)[-1].title
        assert_no_secret(app.export_screenshot())
        assert spaced[8:] not in app.export_screenshot()


async def test_only_secrets_are_masked_in_the_table(make_app, project):
    """WANDB_PROJECT is not a secret: shown in full; a value like a key under another name is
    masked, and a URL shows without its password."""
    (project / ".env").write_text(
        FULL_ENV + "WANDB_PROJECT=crafter-qwen4b-rl\n"
        f"NOTES={NEW_KEY}\n"
        "DATABASE_URL=postgres://bob:hunter2pass@db:5432/rl\n"
    )
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        assert row(screen, "WANDB_PROJECT")[1] == "crafter-qwen4b-rl"
        assert row(screen, "NOTES")[1] == "sk_n…78"
        assert row(screen, "DATABASE_URL")[1] == "postgres://****@db:5432/rl"
        assert row(screen, "OTHER_TOKEN")[1] == "tok_…90"
        shot = app.export_screenshot()
        assert "hunter2pass" not in shot
        assert_no_secret(shot)
        await select_row(pilot, screen, "WANDB_PROJECT")
        await pilot.press("enter")
        assert not app.screen.query_one("#env-value", Input).password  # nothing to hide
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen, "the dialog to close")
        await select_row(pilot, screen, "NOTES")
        await pilot.press("enter")
        assert app.screen.query_one("#env-value", Input).password


async def test_shell_override_alias_and_missing_key(make_app, project):
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    app = make_app(start="env", shell={"SYNTH_API_KEY": SHELL_KEY, "DEV_ENVIRONMENT_API_KEY": ALIAS_KEY})
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        assert row(screen, "SYNTH_API_KEY") == ["SYNTH_API_KEY", "sk_s…23", "shell", "⚠ shell overrides file"]
        assert row(screen, "ENVIRONMENT_API_KEY")[1:3] == ["dev_…c2", "alias DEV_ENVIRONMENT_API_KEY"]
        assert row(screen, "TASK_APP_URL") == ["TASK_APP_URL", "<unset>", "missing", "required — missing"]
        assert "✗ Missing: TASK_APP_URL" in text_of(screen, "#env-status")
        assert "from your shell's environment" in text_of(screen, "#env-detail")
        assert_no_secret(app.export_screenshot())


async def test_task_url_flag_counts_as_a_source(make_app, project):
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\nENVIRONMENT_API_KEY={ENV_KEY}\n")
    app = make_app(start="env", task_url=TASK_URL)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        assert row(screen, "TASK_APP_URL")[1:3] == [TASK_URL, "flag --task-url"]
        assert app.session.missing_keys() == []


async def test_a_preview_override_over_the_flag_is_named_and_an_edit_replaces_it(make_app, project):
    """A Task URL typed in the preview is the preview's, not --task-url's; with a real flag too,
    an edit here replaces the override (the latest choice wins) and the flag still does not."""
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\nENVIRONMENT_API_KEY={ENV_KEY}\n")
    app = make_app(start="env", task_url=TASK_URL)
    typed, edited = "http://127.0.0.1:9", "https://fixed--task-app.modal.run"
    app.session.override(task_url=typed)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        assert row(screen, "TASK_APP_URL")[1:3] == [typed, "preview"]
        await select_row(pilot, screen, "TASK_APP_URL")
        await pilot.press("enter")
        assert "latest choice wins" in text_of(app.screen, "#env-preview-note")
        assert not app.screen.query("#env-shell-warning")
        app.screen.query_one("#env-value", Input).value = edited
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen, "the dialog to close")
        assert app.session.overrides.task_url == edited and app.session.options.task_url == TASK_URL
        assert app.session.env.get("TASK_APP_URL") == edited
        assert row(screen, "TASK_APP_URL")[1:3] == [edited, "preview"]


async def test_a_real_task_url_flag_still_wins_over_an_edit(make_app, project):
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\nENVIRONMENT_API_KEY={ENV_KEY}\n")
    app = make_app(start="env", task_url=TASK_URL)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await select_row(pilot, screen, "TASK_APP_URL")
        await pilot.press("enter")
        assert "set in the --task-url flag, and that value still wins" in text_of(app.screen, "#env-shell-warning")
        assert not app.screen.query("#env-preview-note")
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen, "the dialog to close")
        await edit_selected(pilot, screen, "https://other--task-app.modal.run")
        assert app.session.overrides.task_url == TASK_URL
        assert row(screen, "TASK_APP_URL")[1:3] == [TASK_URL, "flag --task-url"]


async def test_the_embedded_backend_key_is_not_asked_for(make_app, project):
    """With --backend local the run has the embedded backend's own key: SYNTH_API_KEY is not needed."""
    (project / ".env").write_text(f"ENVIRONMENT_API_KEY={ENV_KEY}\nTASK_APP_URL={TASK_URL}\n")
    app = make_app(start="env", backend="http://127.0.0.1:9", backend_key=NEW_KEY)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        # The embedded backend's own key, masked, from the flag; a hosted key is never used there.
        assert row(screen, "SYNTH_API_KEY") == ["SYNTH_API_KEY", "sk_n…78", "flag --backend local", ""]
        assert "✓ Every required key has a value" in text_of(screen, "#env-status")
        assert_no_secret(app.export_screenshot())


async def test_no_env_file_says_how_to_create_one_and_every_binding_has_a_command(make_app, project, fixed_home):
    """And the bindings' ids and the palette's commands, on the same app (was
    test_bindings_have_ids_and_palette_commands_exist)."""
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        assert ("No .env found — press a to add keys; ctrl+s creates ~/project/.env with mode 0600"
                in text_of(screen, "#env-header"))
        assert "✗ Missing: SYNTH_API_KEY, ENVIRONMENT_API_KEY, TASK_APP_URL" in text_of(screen, "#env-status")
        assert all(binding.id for binding in EnvReviewScreen.BINDINGS)
        commands = palette_commands(screen)
        assert len(commands) == 7  # save, other .env, add, reload, from Modal, send to Modal, continue
        for command in commands:
            assert callable(getattr(screen, f"action_{command.action}"))


async def test_a_missing_env_file_flag_is_explained_not_a_traceback(make_app, project):
    app = make_app(start="env", env_files=["missing.env"])
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for_screen(pilot, ErrorDialog, "the error")
        assert app.screen.title_text == "Reading the .env file failed"
        assert app.screen.message == "Env file not found: missing.env"
        assert app.screen.hint == "Pass an existing file with --env-file."
        await pilot.press("escape")
        screen = app.screen
        assert isinstance(screen, EnvReviewScreen)
        assert "No .env loaded — press e to choose one." in text_of(screen, "#env-header")
        await pilot.press("i")
        assert "Press e to choose a .env file first." in notice_lines(app)[-1]


# --------------------------------------------------------------------------- editing


async def test_edit_a_value_with_reveal_stays_in_memory(make_app, project):
    (project / ".env").write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await select_row(pilot, screen, "SYNTH_API_KEY")
        await pilot.press("enter")
        assert isinstance(app.screen, EditValueDialog)
        value = app.screen.query_one("#env-value", Input)
        assert value.password and value.value == SYNTH_KEY
        assert_no_secret(app.export_screenshot())  # dots, not the key

        await pilot.press("ctrl+r")
        assert not value.password  # revealed: the only place a full value may be drawn
        await pilot.press("ctrl+r")
        assert value.password

        value.value = ""
        type_ahead(app, *NEW_KEY, "enter")  # as a terminal sends it: no frame per key
        await wait_for(pilot, lambda: app.screen is screen, what="the dialog to close")
        assert app.session.env.get("SYNTH_API_KEY") == NEW_KEY
        assert row(screen, "SYNTH_API_KEY") == ["SYNTH_API_KEY", "sk_n…78", "not saved yet", "● edited, not saved"]
        assert "● unsaved changes" in text_of(screen, "#env-header")
        assert (project / ".env").read_text() == FULL_ENV  # nothing written yet
        assert_no_secret(app.export_screenshot())


async def test_a_key_added_and_not_saved_says_so(make_app, project):
    (project / ".env").write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await pilot.press("a")
        await wait_for_screen(pilot, AddKeyDialog)
        app.screen.query_one("#env-name", Input).value = "EXTRA_TOKEN"
        app.screen.query_one("#env-value", Input).value = OTHER_TOKEN
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen and "EXTRA_TOKEN" in app.session.env.values,
                         "the key added")
        await select_row(pilot, screen, "EXTRA_TOKEN")
        assert row(screen, "EXTRA_TOKEN")[2] == "not saved yet"
        detail = text_of(screen, "#env-detail")
        assert "not saved yet" in detail and "from .env" not in detail, detail
        assert_no_secret(app.export_screenshot())


def test_an_optional_task_app_url_says_what_it_is_used_for():
    key = ResolvedKey("TASK_APP_URL", TASK_URL, "file", ".env", False, False)
    text = describe(key, ".env")
    assert "Not one of the keys" not in text and "verification checks this task app" in text
    other = ResolvedKey("OTHER_TOKEN", OTHER_TOKEN, "file", ".env", False, False)
    assert "Not one of the keys the train run needs" in describe(other, ".env")


async def test_a_click_selects_a_row_and_a_second_click_edits_it(make_app, project):
    (project / ".env").write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        table = screen.query_one(MaskedEnvTable)
        await pilot.click("#env-table", offset=(3, 3))  # the header is row 0 on screen
        assert table.selected_key == "TASK_APP_URL"
        assert app.screen is screen
        await pilot.click("#env-table", offset=(3, 3))
        assert isinstance(app.screen, EditValueDialog)
        assert app.screen.key.name == "TASK_APP_URL"


async def test_escape_cancels_an_edit(make_app, project):
    (project / ".env").write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await pilot.press("i")
        type_ahead(app, *"changed", "escape")  # as a terminal sends it: no frame per key
        await wait_for(pilot, lambda: app.screen is screen, what="the dialog to close")
        assert app.session.env.get("SYNTH_API_KEY") == SYNTH_KEY
        assert not app.session.env.dirty


async def test_editing_a_shell_key_warns_that_the_shell_still_wins(make_app, project):
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    app = make_app(start="env", shell={"SYNTH_API_KEY": SHELL_KEY})
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await select_row(pilot, screen, "SYNTH_API_KEY")
        await pilot.press("enter")
        warning = text_of(app.screen, "#env-shell-warning")
        assert "set in your shell, and that value still wins for this session" in warning
        app.screen.query_one("#env-value", Input).value = NEW_KEY
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen, "the dialog to close")
        assert app.session.env.get("SYNTH_API_KEY") == NEW_KEY
        assert row(screen, "SYNTH_API_KEY")[1:3] == ["sk_s…23", "shell"]  # the shell's value is used


async def test_add_a_missing_key_and_reject_a_bad_name(make_app, project):
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\nENVIRONMENT_API_KEY={ENV_KEY}\n")
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await pilot.press("a")
        assert isinstance(app.screen, AddKeyDialog)
        name = app.screen.query_one("#env-name", Input)
        assert name.value == "TASK_APP_URL"  # the missing key is suggested

        name.value = "1BAD-NAME"
        app.screen.query_one("#env-value", Input).value = "x" * 12
        await pilot.press("enter")
        await pilot.pause()
        error = app.screen.query_one("#env-error", Static)
        assert error.has_class("-visible")
        assert str(error.render()) == "Key names use letters, digits and underscores, and do not start with a digit."

        name.value = "TASK_APP_URL"
        app.screen.query_one("#env-value", Input).value = TASK_URL
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen, "the dialog to close")
        assert row(screen, "TASK_APP_URL") == ["TASK_APP_URL", TASK_URL, "not saved yet", "● edited, not saved"]
        assert app.session.missing_keys() == []


# --------------------------------------------------------------------------- saving


async def test_save_changes_only_the_edited_line(make_app, project):
    path = project / ".env"
    path.write_bytes(FULL_ENV.encode())
    os.chmod(path, 0o640)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await select_row(pilot, screen, "ENVIRONMENT_API_KEY")
        await edit_selected(pilot, screen, NEW_KEY)
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: not app.session.env.dirty, "the save")
        await pilot.pause()
        expected = FULL_ENV.replace(f'"{ENV_KEY}"  # from the task app', f'"{NEW_KEY}"  # from the task app')
        assert path.read_bytes() == expected.encode()
        assert stat.S_IMODE(path.stat().st_mode) == 0o640  # an existing file keeps its mode
        assert "Saved: Saved .env." in notice_lines(app)
        assert "unsaved" not in text_of(screen, "#env-header")
        assert row(screen, "ENVIRONMENT_API_KEY")[3] == ""
        assert_no_secret("\n".join(notice_lines(app)))


async def test_save_creates_a_new_env_file_with_mode_0600(make_app, project):
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await pilot.press("a")
        app.screen.query_one("#env-value", Input).value = SYNTH_KEY
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.screen is screen, "the dialog to close")
        await pilot.press("ctrl+s")
        path = project / ".env"
        await wait_until(pilot, lambda: path.exists() and not app.session.env.dirty, "the new file")
        assert path.read_text() == f"SYNTH_API_KEY={SYNTH_KEY}\n"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        # Issue 37: the header said "(none found · e to switch)" about the file just created.
        await pilot.pause()
        header = text_of(screen, "#env-header")
        assert "Env file .env  (created here · e to switch)" in header and "none found" not in header


async def test_an_unwritable_env_shows_an_error_and_keeps_the_edits(make_app, project, monkeypatch):
    path = project / ".env"
    path.write_text(FULL_ENV)

    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(envfile.os, "replace", refuse)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await edit_selected(pilot, screen, NEW_KEY)
        await pilot.press("ctrl+s")
        await wait_for_screen(pilot, ErrorDialog, "the error")
        modal = app.screen
        assert modal.title_text == "Saving .env failed"
        assert modal.message == f"Cannot save {path}: Permission denied"
        assert modal.hint == f"Check that {project} exists and is writable and the disk is not full."
        assert_no_secret(app.export_screenshot())
        await pilot.press("escape")
        assert app.screen is screen
        assert path.read_text() == FULL_ENV
        assert app.session.env.get("SYNTH_API_KEY") == NEW_KEY and app.session.env.dirty
        assert "● unsaved changes" in text_of(screen, "#env-header")
        assert not list(project.glob(".env.*.tmp"))


# --------------------------------------------------------------------------- another .env


async def test_a_file_changed_on_disk_is_reloaded_with_the_edits_on_top(make_app, project):
    """ctrl+s refuses to overwrite a file another program changed; the offered reload reads it
    again, puts the user's edit back on top, and the next save keeps both changes."""
    env_path = project / ".env"
    env_path.write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        screen.apply_value("SYNTH_API_KEY", NEW_KEY)
        env_path.write_text(FULL_ENV.replace(OTHER_TOKEN, "tok_FAKE_changed_elsewhere_0987654321"))
        await pilot.press("ctrl+s")
        await wait_for_screen(pilot, ConfirmDialog, "the reload question")
        assert "changed on disk since it was read" in app.screen.question
        await pilot.press("y")
        await wait_until(pilot, lambda: app.session.env.get("OTHER_TOKEN") == "tok_FAKE_changed_elsewhere_0987654321",
                         "the file read again")
        assert app.session.env.get("SYNTH_API_KEY") == NEW_KEY and screen.edited == {"SYNTH_API_KEY"}
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: not app.session.env.dirty, "the save")
        text = env_path.read_text()
        assert NEW_KEY in text and "tok_FAKE_changed_elsewhere_0987654321" in text and SYNTH_KEY not in text
        assert_no_secret(app.export_screenshot())


async def test_a_reload_asks_about_a_key_changed_on_both_sides(make_app, project):
    env_path = project / ".env"
    env_path.write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        screen.apply_value("SYNTH_API_KEY", NEW_KEY)
        env_path.write_text(FULL_ENV.replace(SYNTH_KEY, SHELL_KEY))
        await pilot.press("f5")
        assert isinstance(app.screen, ReloadDialog)  # unsaved edits: keep them, on top
        await pilot.press("k")
        await wait_for_screen(pilot, ConfirmDialog, "the conflict question")
        assert "SYNTH_API_KEY changed on disk too" in app.screen.question
        await pilot.press("y")
        await wait_until(pilot, lambda: app.session.env.get("SYNTH_API_KEY") == NEW_KEY, "my value back")
        assert app.session.env.dirty and SHELL_KEY in env_path.read_text()  # nothing written yet


async def test_choose_another_env_from_the_list(make_app, project):
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    (project / "deploy").mkdir()
    (project / "deploy" / ".env").write_text(f"SYNTH_API_KEY={NEW_KEY}\nTASK_APP_URL={TASK_URL}\n")
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await pilot.press("e")
        assert isinstance(app.screen, PathPromptDialog)
        await wait_until(pilot, lambda: len(app.screen.candidates) == 2, "the candidates")
        await pilot.press("down", "enter")
        await wait_until(pilot, lambda: app.screen is screen and not screen.loading, "the switch")
        await wait_until(pilot, lambda: app.session.env.path.name == ".env"
                         and app.session.env.path.parent.name == "deploy", "the new file")
        assert "Env file deploy/.env  (chosen by you" in text_of(screen, "#env-header")
        assert row(screen, "TASK_APP_URL")[1] == TASK_URL


async def test_choose_another_env_asks_before_dropping_edits(make_app, project):
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    other = project / "other.env"
    other.write_text(f"SYNTH_API_KEY={NEW_KEY}\n")
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await edit_selected(pilot, screen, ENV_KEY)

        await pilot.press("e")
        await wait_until(pilot, lambda: app.screen.candidates, "the candidates")
        app.screen.query_one("#path-input", Input).focus()
        type_ahead(app, *"nowhere.env", "enter")  # as a terminal sends it: no frame per key
        error = app.screen.query_one("#path-error", Static)
        await wait_for(pilot, lambda: error.has_class("-visible"), what="the inline error")
        assert str(error.render()) == "No file at nowhere.env"

        app.screen.query_one("#path-input", Input).value = "other.env"
        await pilot.press("enter")
        await wait_for_screen(pilot, ConfirmDialog, "the confirmation")
        assert "drop the unsaved changes to .env" in app.screen.question
        await pilot.press("y")
        await wait_until(pilot, lambda: app.session.env.path == other.resolve(), "the switch")
        await wait_until(pilot, lambda: not screen.loading, "the load")
        assert row(screen, "SYNTH_API_KEY")[1] == "sk_n…78"
        assert (project / ".env").read_text() == f"SYNTH_API_KEY={SYNTH_KEY}\n"


# --------------------------------------------------------------------------- changed on disk

NEW_URL = "https://changed--task-app-v2.modal.run"


def change_on_disk(path: Path, text: str) -> None:
    """Another program rewrites the file; its mtime moves on a second, as a later write's would
    (two writes within the clock's tick may share one)."""
    path.write_text(text)
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))


async def wait_for_watch(pilot, condition, what: str) -> None:
    """The watch stats the file once a second: allow several ticks on a loaded machine."""
    await wait_for(pilot, condition, what=what, limit=1500, step=0.02)


async def test_a_change_on_disk_is_noticed_without_a_key(make_app, project):
    env_path = project / ".env"
    env_path.write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        notice = screen.query_one("#env-disk", Static)
        assert not notice.display
        change_on_disk(env_path, FULL_ENV.replace(TASK_URL, NEW_URL))
        await wait_for_watch(pilot, lambda: notice.display, "the notice")
        assert ".env changed on disk since it was read — r reloads it" in text_of(screen, "#env-disk")
        await wait_until(pilot, lambda: "Changed on disk: .env changed on disk: press r to reload it."
                         in notice_lines(app), "the notification")
        assert row(screen, "TASK_APP_URL")[1] == TASK_URL  # nothing is read behind the user's back
        # The ✓ line does not say c continues while c waits for the reload.
        assert "c continues" not in text_of(screen, "#env-status")
        assert "r reloads the changed file first" in text_of(screen, "#env-status")
        await pilot.press("r")
        await wait_until(pilot, lambda: row(screen, "TASK_APP_URL")[1] == NEW_URL, "the reload")
        assert not notice.display
        assert "c continues to verification" in text_of(screen, "#env-status")
        assert_no_secret(app.export_screenshot())


async def test_continue_after_a_change_on_disk_never_uses_the_old_value(make_app, project, verification_calls):
    """c right after the change (before the watch's next tick) is refused; after r, the value
    that goes on to verification is the file's new one."""
    env_path = project / ".env"
    env_path.write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        env_path.write_text(FULL_ENV.replace(TASK_URL, NEW_URL))  # same tick, maybe: c reads the file
        await pilot.press("c")
        await wait_until(pilot, lambda: any("Cannot continue yet: .env changed on disk since it was read. Press r"
                                            in n for n in notice_lines(app)), "the refusal")
        assert verification_calls == [] and app.screen is screen
        assert screen.query_one("#env-disk", Static).display
        await pilot.press("r")
        await wait_until(pilot, lambda: app.session.env.get("TASK_APP_URL") == NEW_URL, "the reload")
        await pilot.press("c")
        assert verification_calls == ["verify"]
        assert app.session.secrets()["TASK_APP_URL"] == NEW_URL


async def test_continue_without_saving_checks_the_file_again(make_app, project, verification_calls):
    env_path = project / ".env"
    env_path.write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await edit_selected(pilot, screen, NEW_KEY)
        await pilot.press("c")
        assert isinstance(app.screen, SaveBeforeContinueDialog)
        env_path.write_text(FULL_ENV.replace(TASK_URL, NEW_URL))  # while the question is open
        await pilot.press("c")
        await wait_until(pilot, lambda: app.screen is screen, "the question to close")
        assert verification_calls == []
        assert screen.query_one("#env-disk", Static).display


async def test_reload_with_unsaved_edits_asks_first(make_app, project):
    env_path = project / ".env"
    env_path.write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await edit_selected(pilot, screen, NEW_KEY)  # SYNTH_API_KEY, the first row
        change_on_disk(env_path, FULL_ENV.replace(TASK_URL, NEW_URL))
        await pilot.press("r")
        assert isinstance(app.screen, ReloadDialog)
        assert "unsaved edits to SYNTH_API_KEY" in text_of(app.screen, "#dialog-detail")
        assert_no_secret(app.export_screenshot())
        await pilot.press("escape")  # stay: nothing read, nothing dropped
        assert app.screen is screen and app.session.env.get("SYNTH_API_KEY") == NEW_KEY
        assert app.session.env.get("TASK_APP_URL") == TASK_URL

        await pilot.press("r", "k")  # keep: the new file with my edit on top
        await wait_until(pilot, lambda: app.session.env.get("TASK_APP_URL") == NEW_URL, "the reload")
        assert app.session.env.get("SYNTH_API_KEY") == NEW_KEY and screen.edited == {"SYNTH_API_KEY"}

        await pilot.press("r", "d")  # drop: the file as it is
        await wait_until(pilot, lambda: app.session.env.get("SYNTH_API_KEY") == SYNTH_KEY, "the edits dropped")
        assert not app.session.env.dirty and screen.edited == set()


# --------------------------------------------------------------------------- leaving


async def test_continue_is_blocked_while_a_required_key_is_missing(make_app, project, verification_calls):
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await pilot.press("c")
        await pilot.pause()
        assert app.screen is screen and verification_calls == []
        assert (
            "Cannot continue yet: Missing ENVIRONMENT_API_KEY, TASK_APP_URL. Select the row and press enter "
            "to set a value, or press a to add a key. TASK_APP_URL can also be given with --task-url."
        ) in notice_lines(app)


async def test_continue_goes_to_verification_when_complete(make_app, project, verification_calls):
    (project / ".env").write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        await env_screen(pilot)
        await pilot.press("ctrl+n")
        assert verification_calls == ["verify"]


async def test_continue_with_unsaved_edits_asks_and_can_skip_saving(make_app, project, verification_calls):
    (project / ".env").write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await edit_selected(pilot, screen, NEW_KEY)
        await pilot.press("c")
        assert isinstance(app.screen, SaveBeforeContinueDialog)
        assert "This session uses the values shown either way" in text_of(app.screen, "#dialog-detail")
        await pilot.press("c")
        assert verification_calls == ["verify"]
        assert (project / ".env").read_text() == FULL_ENV
        assert app.session.secrets()["SYNTH_API_KEY"] == NEW_KEY  # in-memory value is used


async def test_continue_with_unsaved_edits_can_save_first(make_app, project, verification_calls):
    (project / ".env").write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await edit_selected(pilot, screen, NEW_KEY)
        await pilot.press("c", "s")
        await wait_until(pilot, lambda: verification_calls == ["verify"], "the save and continue")
        assert f"SYNTH_API_KEY={NEW_KEY}\n" in (project / ".env").read_text()


async def test_escape_goes_back_and_asks_when_there_are_unsaved_edits(make_app, project):
    (project / ".env").write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await edit_selected(pilot, screen, NEW_KEY)
        await pilot.press("escape")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("n")
        assert app.screen is screen
        await pilot.press("escape", "y")
        await wait_for_screen(pilot, ConfigPickerScreen, "the picker")
        assert app.session.env.get("SYNTH_API_KEY") == NEW_KEY  # kept in memory for this session


# --------------------------------------------------------------------------- snapshots

SNAPSHOTS = Path(__file__).parent / "__snapshots__" / Path(__file__).stem


def _review(*keys: str, captured: list[str], help_key: bool = False):
    async def run_before(pilot) -> None:
        await env_screen(pilot)
        if help_key:  # the footer is filled after the screen is: wait for what it reads
            await wait_for(pilot, lambda: "? Help" in footer_text(pilot.app), what="? Help in the footer")
        if keys:
            await pilot.press(*keys)
        await pilot.pause()
        captured.append(pilot.app.export_screenshot())

    return run_before


def test_snapshot_env_review(snap_compare, make_app, project, fixed_home):
    (project / ".env").write_text(FULL_ENV)
    captured: list[str] = []
    assert snap_compare(make_app(start="env"), terminal_size=(120, 36), run_before=_review(captured=captured))
    assert_no_secret(captured[0])


def test_snapshot_env_review_missing_key_and_shell_override(snap_compare, make_app, project, fixed_home):
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    app = make_app(start="env", shell={"SYNTH_API_KEY": SHELL_KEY, "DEV_ENVIRONMENT_API_KEY": ALIAS_KEY})
    captured: list[str] = []
    assert snap_compare(app, terminal_size=(120, 36), run_before=_review(captured=captured))
    assert_no_secret(captured[0])


def test_snapshot_env_edit_modal_masks_the_value(snap_compare, make_app, project, fixed_home):
    (project / ".env").write_text(FULL_ENV)
    captured: list[str] = []
    assert snap_compare(make_app(start="env"), terminal_size=(120, 36), run_before=_review("enter", captured=captured))
    assert_no_secret(captured[0])


async def test_every_footer_key_shows_whole_at_80x24(make_app, project, fixed_home):
    """The newcomer's walk: at 80 columns Reload, From Modal, Back and Quit fell off the edge."""
    (project / ".env").write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(80, 24)) as pilot:
        await env_screen(pilot)
        await wait_for(pilot, lambda: "? Help" in footer_text(pilot.app), what="? Help in the footer")
        await wait_for(pilot, lambda: not footer_keys_missing(app), what="every key in the footer")
        assert "esc Back" in footer_text(app) and "^q Quit" in footer_text(app)


def test_snapshot_env_review_narrow(snap_compare, make_app, project, fixed_home):
    """At 80x24 `? Help` is in the footer (once test_the_help_key_is_in_the_footer_at_80x24, which
    opened the same screen on a full .env: the footer's keys do not depend on the keys shown)."""
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    app = make_app(start="env", shell={"SYNTH_API_KEY": SHELL_KEY, "DEV_ENVIRONMENT_API_KEY": ALIAS_KEY})
    captured: list[str] = []
    assert snap_compare(app, terminal_size=(80, 24), run_before=_review(captured=captured, help_key=True))
    assert_no_secret(captured[0])


def test_no_stored_snapshot_holds_a_secret():
    stored = sorted(SNAPSHOTS.glob("*.svg"))
    if not stored:
        pytest.skip("no snapshots stored yet (run with --snapshot-update)")
    for svg in stored:
        assert_no_secret(svg.read_text())


async def test_the_reveal_key_is_in_help_and_opens_the_value_shown(make_app, project):
    """Issue 37: ctrl+r (show a value) lived only in the edit dialog and not in `?`. On the env
    review it is listed in `?` and opens the selected key's edit dialog with its value shown;
    the table stays masked."""
    from textual.widgets import DataTable

    from app.screens.dialogs.common import HelpDialog

    (project / ".env").write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await pilot.press("question_mark")
        help_dialog = await wait_for_screen(pilot, HelpDialog, "the help")
        table = help_dialog.query_one("#help-table", DataTable)
        rows = [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]
        assert ("^r", "Edit with the value shown") in rows, rows
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen, "the help to close")
        await select_row(pilot, screen, "ENVIRONMENT_API_KEY")
        await pilot.press("ctrl+r")
        dialog = await wait_for_screen(pilot, EditValueDialog, "the edit dialog")
        assert dialog.value_input().password is False and dialog.value_input().value == ENV_KEY
        assert str(dialog.query_one("#env-reveal").label) == "Hide (ctrl+r)"
        assert ENV_KEY not in str(screen.query_one(MaskedEnvTable).get_row_at(0))


async def test_the_help_lists_each_key_once(make_app, project):
    """The walk: the env review's `?` listed Enter twice (the screen's edit and the table's select)."""
    from textual.widgets import DataTable

    from app.screens.dialogs.common import HelpDialog

    (project / ".env").write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        await env_screen(pilot)
        await pilot.press("question_mark")
        help_dialog = await wait_for_screen(pilot, HelpDialog, "the help")
        table = help_dialog.query_one("#help-table", DataTable)
        keys = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        rows = [tuple(map(str, table.get_row_at(i))) for i in range(table.row_count)]
        enters = [row for row in rows if row[0] in ("enter", "⏎")]
        assert enters == [("enter", "Edit")], enters
        assert len(keys) == len(set(keys)), keys


@pytest.mark.parametrize("key, dialog", [("c", SaveBeforeContinueDialog), ("r", ReloadDialog)])
async def test_a_choice_dialogs_buttons_are_whole_at_80x24(make_app, project, key, dialog):
    env_path = project / ".env"
    env_path.write_text(FULL_ENV)
    app = make_app(start="env")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await env_screen(pilot)
        await edit_selected(pilot, screen, NEW_KEY)
        if key == "r":
            change_on_disk(env_path, FULL_ENV.replace(TASK_URL, NEW_URL))
        await pilot.press(key)
        await wait_for_screen(pilot, dialog, "the question")
        await pilot.pause()
        body = app.screen.query_one("#dialog-body").content_region
        for button in app.screen.query(Button):
            label = str(button.label)
            assert body.contains_region(button.region), f"{label!r} is cut at 80 columns"
            assert "…" not in "".join(strip.text for strip in button.render_lines(button.region.reset_offset))
