"""The command line: ``launcher`` (the installed ``synth-tui``: Ctrl+C before the first import),
then the words parsed and each command sent to its front end. Nothing is imported here: the
launcher's first line runs before any of the command line's modules load."""
