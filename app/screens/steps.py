"""Each step's screen, made on demand: a screen's module is imported when the screen is first
shown, so the first frame waits only for its own screen, not for the dashboard's charts or the
HTTP client (docs/performance.md#first-paint)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.screens.base import FlowScreen

if TYPE_CHECKING:
    from app.core.runs.jobs import JobContext


def picker_screen() -> FlowScreen:
    from app.screens.config_picker import ConfigPickerScreen

    return ConfigPickerScreen()


def env_screen() -> FlowScreen:
    from app.screens.env_review import EnvReviewScreen

    return EnvReviewScreen()


def verification_screen() -> FlowScreen:
    from app.screens.verification import VerificationScreen

    return VerificationScreen()


def preview_screen() -> FlowScreen:
    from app.screens.preview import PayloadPreviewScreen

    return PayloadPreviewScreen()


def dashboard_screen(job: JobContext) -> FlowScreen:
    from app.screens.dashboard import DashboardScreen

    return DashboardScreen(job)
