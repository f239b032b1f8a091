"""The commands that run the embedded backend or a task app from this process: ``demo``,
``lab``, ``--backend local`` (``embedded_backend``), and ``backend``/``taskapp``/``ranks-host``/
``tiny-model`` in the foreground (``foreground``)."""
