"""``synth-tui serve``: the app in a browser (docs/browser.md). Imported only by that command:
the TUI and the headless front ends never load aiohttp or textual-serve."""
