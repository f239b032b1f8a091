"""The config picker: discovery order, filtering, the preview's verdict, open by path, choosing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from textual.widgets import Input, Static

from app.core.config import rl as cfg
from app.screens.commands import palette_commands
from app.screens.config_picker import ConfigPickerScreen
from app.screens.dialogs.path_prompt import PathPromptDialog
from app.screens.env_review import EnvReviewScreen
from support.pilot_waits import type_ahead, wait_for, wait_for_screen, wait_until
from support.screen_text import footer_text, notifications
from widgets.config_list import ConfigList
from widgets.config_preview import ConfigPreview

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "rl"
BROKEN = REPO / "tests" / "data" / "configs"

# Discovery would also search the checkout's own configs/ folder; these tests look at the project.
pytestmark = pytest.mark.usefixtures("project_configs_only")


@pytest.fixture
def configs(project):
    folder = project / "configs"
    for name in ("crafter_qwen4b.toml", "crafter_policy_lora.toml"):
        shutil.copy(EXAMPLES / name, folder / name)
    shutil.copy(BROKEN / "many_problems.toml", folder / "many_problems.toml")
    return folder


async def discovered(pilot) -> ConfigPickerScreen:
    screen = pilot.app.screen
    assert isinstance(screen, ConfigPickerScreen)
    await wait_until(pilot, lambda: screen.searched, "discovery")
    await pilot.pause()
    return screen


def labels(screen: ConfigPickerScreen) -> list[str]:
    return [entry.label for entry in screen.query_one(ConfigList).entries]


def prompts(screen: ConfigPickerScreen) -> list[str]:
    config_list = screen.query_one(ConfigList)
    return [str(config_list.get_option_at_index(i).prompt) for i in range(config_list.option_count)]


def preview_text(screen: ConfigPickerScreen) -> str:
    preview = screen.query_one(ConfigPreview)
    return "\n".join(str(static.render()) for static in preview.query(Static) if static.id != "preview-source")


def highlight(screen: ConfigPickerScreen, label: str) -> None:
    screen.query_one(ConfigList).highlighted = labels(screen).index(label)


def notice_messages(app) -> list[str]:
    return [n.message for n in notifications(app)]


# --------------------------------------------------------------------------- discovery


async def test_last_used_config_is_listed_first_and_marked(make_app, configs):
    cfg.write_last_config(configs / "crafter_qwen4b.toml")
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        assert labels(screen) == [
            "configs/crafter_qwen4b.toml", "configs/crafter_policy_lora.toml", "configs/many_problems.toml"]
        shown = prompts(screen)
        assert "★ last used" in shown[0]
        assert not any("last used" in text for text in shown[1:])
        assert shown[2].startswith("✗") and "9 problems" in shown[2]
        assert shown[0].startswith("✓")


async def test_config_paths_from_the_command_line_come_first(make_app, configs):
    cfg.write_last_config(configs / "crafter_qwen4b.toml")
    app = make_app(config_paths=[str(configs / "many_problems.toml")])
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        assert labels(screen)[:2] == ["configs/many_problems.toml", "configs/crafter_qwen4b.toml"]
        assert "--config" in prompts(screen)[0]


async def test_paths_outside_the_project_are_shown_absolute(make_app, configs, tmp_path):
    elsewhere = tmp_path / "elsewhere" / "outside.toml"
    elsewhere.parent.mkdir()
    shutil.copy(EXAMPLES / "crafter_qwen4b.toml", elsewhere)
    app = make_app(config_paths=[str(elsewhere)])
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        assert labels(screen)[0] == str(elsewhere.resolve())


async def test_empty_project_says_what_to_do(make_app, project, fixed_home):
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        message = str(screen.query_one("#picker-message", Static).render())
        assert "No RL config was found under ~/project" in message
        assert "Press o to open a config file" in message
        await pilot.press("enter")
        assert "There is no config to choose yet. Press o to open one by its path." in notice_messages(app)


async def test_reload_finds_a_new_config(make_app, configs):
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        shutil.copy(EXAMPLES / "crafter_qwen4b.toml", configs / "second.toml")
        screen.searched = False
        await pilot.press("r")
        await wait_until(pilot, lambda: "configs/second.toml" in labels(screen), "the new config")


# --------------------------------------------------------------------------- filter


async def test_typing_in_the_filter_narrows_the_list(make_app, configs):
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        await pilot.press("slash")
        assert screen.query_one("#picker-filter", Input).has_focus
        type_ahead(app, *"crafter lora")  # as a terminal sends it: no frame per key
        await wait_for(pilot, lambda: labels(screen) == ["configs/crafter_policy_lora.toml"], what="the list narrowed")
        assert screen.query_one("#picker-list-pane").border_title == "Configs 1 of 3"
        assert screen.query_one(ConfigPreview).entry.label == "configs/crafter_policy_lora.toml"

        type_ahead(app, "backspace", "backspace", "backspace", "backspace", *"zzz")
        await wait_for(pilot, lambda: screen.query_one("#picker-filter", Input).value == "crafter zzz",
                       what="the filter typed")
        assert labels(screen) == []
        assert "No config matches" in str(screen.query_one("#picker-message", Static).render())
        await pilot.press("enter")  # in the filter, all of them filtered out: the filter is what to change
        assert "No config matches the filter. Esc clears it." in notice_messages(app)
        assert not any("no config to choose yet" in message for message in notice_messages(app))

        await pilot.press("escape")
        assert len(labels(screen)) == 3
        assert screen.query_one(ConfigList).has_focus


async def test_q_quits_from_the_list_and_is_a_letter_in_the_filter(make_app, configs):
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        await pilot.press("slash", "q")
        assert screen.query_one("#picker-filter", Input).value == "q"
        assert app.is_running
        await pilot.press("escape", "q")
        await wait_until(pilot, lambda: not app.is_running, "the app to quit")


# --------------------------------------------------------------------------- verdicts


async def test_invalid_config_lists_its_problems_and_cannot_be_chosen(make_app, configs):
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        highlight(screen, "configs/many_problems.toml")
        await pilot.pause()
        text = preview_text(screen)
        assert "✗ 9 problems" in text
        assert "line 3" in text and "algorithm.type" in text and "unsupported type 'offline'" in text
        assert "line 7" in text and "compute.gpu_count" in text and "field required" in text
        assert "Key facts appear once the config is valid." in text

        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfigPickerScreen)
        assert app.session.config_path is None
        assert any("has 9 problems" in message for message in notice_messages(app))
        assert screen.query_one("#preview-verdict").has_class("-flash")


async def test_the_lm_example_before_its_model_is_made_shows_a_next_step_not_an_error(make_app, configs):
    """Issue 37 item 3: on a fresh clone lm_press.toml's ./tiny-qwen3 is not made yet; the list
    and the preview say which step makes it ready, without a ✗; enter says the step."""
    shutil.copy(EXAMPLES / "lm_press.toml", configs / "lm_press.toml")
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        prompt = next(p for p in prompts(screen) if "lm_press.toml" in p)
        assert prompt.startswith("→ ") and "1 step first" in prompt and "✗" not in prompt
        highlight(screen, "configs/lm_press.toml")
        await pilot.pause()
        text = preview_text(screen)
        assert "→ 1 step before it can run" in text and "✗" not in text
        assert "next step: make it first: `synth-tui tiny-model tiny-qwen3`" in text

        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ConfigPickerScreen) and app.session.config_path is None
        assert any("Next step: make it first" in message for message in notice_messages(app))
        # A genuinely broken config still shows its ✗.
        assert next(p for p in prompts(screen) if "many_problems" in p).startswith("✗ ")


async def test_the_next_step_names_the_command_as_it_was_run(make_app, configs, monkeypatch):
    """Walk 37 item 8: run as `/work/walk37/.venv/bin/synth-tui`, the picker said
    `synth-tui tiny-model tiny-qwen3` ("command not found" without the virtualenv activated);
    the preview's next step and the toast name the program as it was started."""
    started_as = "/nowhere/walk37/.venv/bin/synth-tui"
    monkeypatch.setattr("sys.argv", [started_as, "lab"])
    shutil.copy(EXAMPLES / "lm_press.toml", configs / "lm_press.toml")
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        highlight(screen, "configs/lm_press.toml")
        await pilot.pause()
        assert f"next step: make it first: `{started_as} tiny-model tiny-qwen3`" in preview_text(screen)
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("Next step" in m for m in notice_messages(app)), what="the toast")
        assert any(f"`{started_as} tiny-model tiny-qwen3`" in m for m in notice_messages(app)), notice_messages(app)


async def test_toml_syntax_error_shows_line_and_column(make_app, configs):
    shutil.copy(BROKEN / "syntax_error.toml", configs.parent / "broken.toml")
    app = make_app(config_paths=[str(configs.parent / "broken.toml")])
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        assert labels(screen)[0] == "broken.toml"
        text = preview_text(screen)
        assert "✗ 1 problem" in text
        assert "line 7 col" in text and "TOML" in text and "invalid TOML" in text


async def test_a_discovered_file_with_a_syntax_error_is_listed_not_hidden(make_app, configs):
    shutil.copy(BROKEN / "syntax_error.toml", configs / "broken.toml")
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        label = next(name for name in labels(screen) if name.endswith("broken.toml"))
        highlight(screen, label)
        await pilot.pause()
        text = preview_text(screen)
        assert "✗ 1 problem" in text and "invalid TOML" in text


async def test_preview_reloads_when_the_file_changes_on_disk(make_app, configs):
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        highlight(screen, "configs/crafter_qwen4b.toml")
        target = configs / "crafter_qwen4b.toml"
        target.write_text(target.read_text().replace("gpu_count = 8\n", ""))
        stat = target.stat()
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
        screen.check_highlighted_for_changes()  # what the 2-second timer calls
        await wait_until(pilot, lambda: "compute.gpu_count" in preview_text(screen), "the changed file")
        assert not screen.query_one(ConfigPreview).entry.ok
        assert "✗" in prompts(screen)[labels(screen).index("configs/crafter_qwen4b.toml")]


# --------------------------------------------------------------------------- open by path


async def test_open_path_with_a_missing_file_shows_an_inline_error(make_app, configs):
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await discovered(pilot)
        await pilot.press("o")
        assert isinstance(app.screen, PathPromptDialog)
        type_ahead(app, *"configs/nope.toml", "enter")  # as a terminal sends it: no frame per key
        error = app.screen.query_one("#path-error", Static)
        await wait_for(pilot, lambda: error.has_class("-visible"), what="the inline error")
        assert str(error.render()) == "No file at configs/nope.toml"
        assert isinstance(app.screen, PathPromptDialog)
        await pilot.press("escape")
        assert isinstance(app.screen, ConfigPickerScreen)


async def test_open_path_refuses_a_file_that_is_not_toml(make_app, configs, project):
    (project / "notes.txt").write_text("these are [[ not toml\n")
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await discovered(pilot)
        await pilot.press("o")
        type_ahead(app, *"notes.txt", "enter")  # as a terminal sends it: no frame per key
        error = app.screen.query_one("#path-error", Static)
        await wait_for(pilot, lambda: error.has_class("-visible"), what="the inline error")
        assert str(error.render()) == "notes.txt is not a TOML file"


async def test_an_opened_file_joins_the_list_and_is_selected(make_app, configs, project):
    # In a folder discovery skips (SKIP_DIR_NAMES), so only the open lists it. At the project's
    # top discovery listed it from the start (it lists broken TOML too): the wait for it waited
    # for nothing, and under load the path dialog was still open at the next assert.
    (project / "fixtures").mkdir()
    shutil.copy(BROKEN / "syntax_error.toml", project / "fixtures" / "broken.toml")
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        assert "fixtures/broken.toml" not in labels(screen)
        await pilot.press("o")
        type_ahead(app, *"fixtures/broken.toml", "enter")  # as a terminal sends it: no frame per key
        await wait_for(pilot, lambda: app.screen is screen and "fixtures/broken.toml" in labels(screen),
                       what="the dialog closed and the opened file listed")
        assert screen.query_one(ConfigList).highlighted_entry.label == "fixtures/broken.toml"
        await wait_for(pilot, lambda: "invalid TOML" in preview_text(screen), what="its preview")
        # It stays listed after a reload.
        screen.searched = False
        await pilot.press("r")
        await wait_until(pilot, lambda: screen.searched, "the reload")
        assert "fixtures/broken.toml" in labels(screen)


# --------------------------------------------------------------------------- choosing


async def test_an_enter_the_terminal_turned_into_a_newline_chooses(make_app, configs):
    """An Enter typed before the app took the keyboard reaches it as a newline (ctrl+j)."""
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        highlight(screen, "configs/crafter_qwen4b.toml")
        await pilot.press("ctrl+j")
        await wait_for_screen(pilot, EnvReviewScreen, "the env screen")


async def test_a_valid_configs_preview_shows_its_facts_and_choosing_it_moves_to_the_env_screen(make_app, configs):
    """Three tests once, on the same app: the bindings and the palette's commands (was
    test_bindings_have_ids_and_palette_commands_exist), the valid config's preview (was
    test_valid_config_preview_shows_facts_and_verdict), then choosing it."""
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        assert all(binding.id for binding in ConfigPickerScreen.BINDINGS)
        commands = palette_commands(screen)
        assert {command.title for command in commands} == {"Open config file…", "Reload configs"}
        for command in commands:
            assert callable(getattr(screen, f"action_{command.action}"))

        highlight(screen, "configs/crafter_qwen4b.toml")
        await pilot.pause()
        text = preview_text(screen)
        assert "✓ valid RL config" in text
        assert "Qwen/Qwen3-4B ([model].base)" in text
        assert "online/policy_gradient/gspo" in text
        assert "H100 x 8" in text

        await pilot.press("enter")
        await wait_for_screen(pilot, EnvReviewScreen, "the env screen")
        chosen = (configs / "crafter_qwen4b.toml").resolve()
        assert app.session.config_path == chosen
        assert app.session.report is not None and app.session.report.ok
        assert cfg.read_last_config() == chosen


async def test_a_click_previews_and_a_second_click_chooses(make_app, configs):
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await discovered(pilot)
        assert screen.query_one(ConfigList).highlighted == 0
        await pilot.click("#picker-list", offset=(4, 1))
        assert screen.query_one(ConfigList).highlighted == 1
        assert isinstance(app.screen, ConfigPickerScreen)
        await pilot.click("#picker-list", offset=(4, 1))
        await wait_for_screen(pilot, EnvReviewScreen, "the env screen")


# --------------------------------------------------------------------------- snapshots


def _after_discovery(*keys: str, highlight_label: str | None = None, help_key: bool = False):
    async def run_before(pilot) -> None:
        await discovered(pilot)
        if help_key:  # the footer is filled after the screen is: wait for what it reads
            await wait_for(pilot, lambda: "? Help" in footer_text(pilot.app), what="? Help in the footer")
        if highlight_label:
            highlight(pilot.app.screen, highlight_label)
        if keys:
            await pilot.press(*keys)
        await pilot.pause()

    return run_before


def test_snapshot_picker(snap_compare, make_app, configs, fixed_home):
    cfg.write_last_config(configs / "crafter_qwen4b.toml")
    assert snap_compare(make_app(), terminal_size=(120, 36), run_before=_after_discovery())


def test_snapshot_picker_invalid_highlighted(snap_compare, make_app, configs, fixed_home):
    assert snap_compare(make_app(), terminal_size=(120, 36),
                        run_before=_after_discovery(highlight_label="configs/many_problems.toml"))


def test_snapshot_picker_empty(snap_compare, make_app, project, fixed_home):
    assert snap_compare(make_app(), terminal_size=(120, 36), run_before=_after_discovery())


def test_snapshot_picker_narrow(snap_compare, make_app, configs, fixed_home):
    """At 80x24 `? Help` is in the footer (once test_the_help_key_is_in_the_footer_at_80x24, the same app)."""
    cfg.write_last_config(configs / "crafter_qwen4b.toml")
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=_after_discovery(help_key=True))


async def test_the_session_changes_only_on_the_ui_thread(make_app, configs, monkeypatch):
    # Workers read and remember on threads; the session they share with every screen is changed
    # by the UI thread alone (a choice, an .env read, the keys resolved from them).
    import threading

    from app.core.launch.session import LaunchSession

    threads: list[str] = []
    for name in ("choose_config", "use_env", "resolve", "replace_env"):
        original = getattr(LaunchSession, name)

        def recording(self, *args, __original=original, __name=name, **kwargs):
            threads.append(f"{__name} on {threading.current_thread().name}")
            return __original(self, *args, **kwargs)

        monkeypatch.setattr(LaunchSession, name, recording)
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await discovered(pilot)
        await pilot.press("enter")
        screen = await wait_for_screen(pilot, EnvReviewScreen, "the env review")
        await wait_until(pilot, lambda: not screen.loading, "the .env read")
    assert any(t.startswith("choose_config") for t in threads) and any(t.startswith("use_env") for t in threads)
    assert all(t.endswith(f"on {threading.main_thread().name}") for t in threads), threads
