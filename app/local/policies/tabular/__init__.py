"""The `tabular` stand-in policy and the action space it compiles from a task app's tools."""
