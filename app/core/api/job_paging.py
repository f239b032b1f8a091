"""The job list's paging (docs/wire-contract.md#job-list) and its orders: constants the command
line's help needs, kept apart from the HTTP client so that parsing flags imports nothing heavy."""

from __future__ import annotations

# Jobs per request, and the most listed.
JOB_PAGE_SIZE = 100
MAX_LISTED_JOBS = 1000
# The job list's orders: newest first, then by status, by last mean score, by model.
SORTS = ("created", "status", "score", "model")
