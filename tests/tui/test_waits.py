"""The tests' own waits (support/pilot_waits.py): a wait for a screen that never comes says which screen
was shown instead and what it showed, so a failure under load says where the flow stopped."""

from __future__ import annotations

import pytest
from textual.app import App
from textual.screen import Screen
from textual.widgets import Static

from support.pilot_waits import wait_for_screen


class NeverShown(Screen):
    pass


class Shown(App):
    def compose(self):
        yield Static("Checking… 1 of 2 done.")


async def test_a_screen_that_never_comes_is_named_with_what_was_shown_instead():
    app = Shown()
    async with app.run_test() as pilot:
        with pytest.raises(AssertionError) as caught:
            await wait_for_screen(pilot, NeverShown, "the dashboard", limit=2)
    said = str(caught.value)
    assert said.startswith("timed out waiting for the dashboard; the screen was Screen (mounted: True)"), said
    assert "Checking… 1 of 2 done." in said
