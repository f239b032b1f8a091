"""A footer whose keys are never cut mid-word (docs/product.md#keys).

Textual's Footer lays its keys in one row and clips what does not fit, so a narrow terminal
showed `d Diagnosti▏` or a lone `^` before the palette key. Here the palette key is left out
below ``palette_from`` columns (80: Ctrl+P still works, and `?` says so), and a key that does not
fit whole is hidden with every key after it: the first keys are the ones that matter most.
Which keys fit is known only once they are laid out, a frame after they are made: until then
the keys are laid out but not drawn (class ``-fitting``), so no frame ever shows a cut key,
however long a loaded machine takes to draw the next one.
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult

from widgets.compat.textual_compat import FooterKey
from widgets.steady_footer import SteadyFooter

PALETTE_FROM = 80  # as every other footer shows it at 80 columns (docs/product.md#keys)
# Frames to wait for new keys to be laid out before fitting them (a screen not shown lays out none).
FIT_ATTEMPTS = 20


class FlowFooter(SteadyFooter):
    def __init__(self, *, palette_from: int = PALETTE_FROM, compact: bool = False) -> None:
        super().__init__(compact=compact)
        self.palette_from = palette_from
        self._fit_pending = False  # keys shown hidden (-fitting) until the next layout places them

    def compose(self) -> ComposeResult:
        self.set_reactive(SteadyFooter.show_command_palette, self.app.size.width >= self.palette_from)
        self.add_class("-fitting")
        self._fit_pending = False  # these keys are fitted once mounted (on_mount, recompose)
        yield from super().compose()

    def on_mount(self) -> None:
        super().on_mount()
        self.screen.screen_layout_refresh_signal.subscribe(self, self._fit_when_laid_out)
        self._fit_after_layout()

    def on_unmount(self) -> None:
        super().on_unmount()
        self.screen.screen_layout_refresh_signal.unsubscribe(self)

    async def recompose(self) -> None:
        await super().recompose()  # the old keys removed and the new ones mounted
        self._fit_after_layout()

    def on_resize(self, event: events.Resize) -> None:
        self.add_class("-fitting")
        if (self.app.size.width >= self.palette_from) != self.show_command_palette:
            self.call_after_refresh(self.recompose)
        else:
            for key in self.query(FooterKey):
                key.remove_class("-cut")
            self._fit_after_layout()

    def _fit_after_layout(self) -> None:
        self._fit_pending = True
        self.call_after_refresh(self._fit_when_laid_out)  # if no later layout comes

    def _fit_when_laid_out(self, _screen: object = None) -> None:
        """Fit the keys once each shown one has its place; until then the next layout calls again."""
        if not self._fit_pending or any(key.display and not key.region.width for key in self.query(FooterKey)):
            return
        self._fit_pending = False
        self._hide_cut_keys()

    def _hide_cut_keys(self) -> None:
        """Hide the first key that runs past the edge (or into the palette key), and the rest."""
        keys = [key for key in self.query(FooterKey) if not key.has_class("-command-palette")]
        palette = [key for key in self.query(FooterKey) if key.has_class("-command-palette")]
        edge = min([self.region.right, *(key.region.x for key in palette if key.display)])
        cut = False
        for key in keys:
            cut = cut or key.region.right > edge
            if cut and key.display:
                key.add_class("-cut")
        self.remove_class("-fitting")
