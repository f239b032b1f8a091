"""The backend's HTTP API as the client sees it: URLs, the client, the wire models of its
answers, the job watch, the task app's health check."""
