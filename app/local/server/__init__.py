"""The embedded backend's HTTP side: the app and its routes, request bodies, the guard, errors, the model check."""
