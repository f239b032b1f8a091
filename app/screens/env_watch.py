"""The env review's watch on its .env (docs/product.md#env-review): a stat a second while the
screen is active; a change on disk shows a notice at once and offers the reload (r), and
continuing is refused until the file is read again, so no step runs on values the file no
longer holds. What counts as a change is ``EnvFile.changed_on_disk`` (app/core/env/envfile.py).
"""

from __future__ import annotations

from collections.abc import Callable

from textual.content import Content
from textual.reactive import reactive
from textual.timer import Timer
from textual.widgets import Static

from app.screens.base import FlowScreen

WATCH_SECONDS = 1.0
# Workers that read or write the .env: while one runs, the file and the EnvFile may briefly
# disagree (our own save), so the watch waits for it.
_FILE_WORKERS = ("env-open", "env-save")


class DiskWatch(FlowScreen):
    """Mixed into the env review, which provides ``file_label()`` and a ``#env-disk`` Static."""

    disk_changed: reactive[bool] = reactive(False, init=False)
    file_label: Callable[[], str]
    _disk_timer: Timer | None = None

    def start_disk_watch(self) -> None:
        self._disk_timer = self.set_interval(WATCH_SECONDS, self.check_disk, name="env-watch")

    def on_screen_suspend(self) -> None:
        # Another step (or a dialog) is on top: nobody sees this screen, so no stat.
        if self._disk_timer is not None:
            self._disk_timer.pause()

    def on_screen_resume(self) -> None:
        if self._disk_timer is not None:
            self._disk_timer.resume()
            self.check_disk()

    def check_disk(self, *, thorough: bool = False) -> bool:
        """True when the .env changed on disk since it was read (the notice then shows)."""
        env = self.session.env
        if env is None or self.disk_changed or self._file_busy():
            return self.disk_changed
        if env.changed_on_disk(thorough=thorough):
            self.disk_changed = True
        return self.disk_changed

    def disk_read_again(self) -> None:
        """The .env in use was just read (or written): what is shown is what the disk holds."""
        self.disk_changed = False

    def _file_busy(self) -> bool:
        return any(worker.node is self and worker.group in _FILE_WORKERS and not worker.is_finished
                   for worker in self.app.workers)

    def disk_state_shown(self) -> None:
        """A screen whose other lines depend on the disk state redraws them here."""

    def watch_disk_changed(self, changed: bool) -> None:
        notice = self.query_one("#env-disk", Static)
        notice.set_class(changed, "-visible")
        self.disk_state_shown()
        if not changed:
            return
        label = self.file_label()
        notice.update(Content.assemble(
            ("⚠ ", "$text-warning"), (label, "bold"), " changed on disk since it was read — ",
            ("r", "bold"), " reloads it; c waits until then."))
        self.notify(f"{label} changed on disk: press r to reload it.", title="Changed on disk",
                    severity="warning", markup=False)
