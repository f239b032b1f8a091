""".env files: reading, editing, saving and discovering them, resolving the keys a run needs,
and the env review's questions in words."""
