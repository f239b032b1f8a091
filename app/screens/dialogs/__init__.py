"""The app's dialogs: Textual screens pushed over a step that answer one question and close.

They are called dialogs, never "modals": Modal is also the cloud service the app talks to
(app/core/modal.py; its dialogs are in ``modal_service``). Each module is imported when its
dialog is first shown.

- ``common``: confirm, error, help (every step)
- ``env``: edit a value, add a key, save before continuing, reload (the env review)
- ``modal_service``: pick a Modal secret or endpoint, wait for a Modal call, name a secret
- ``path_prompt``: a file by its path or from a list
- ``overlay_picker``: the earlier runs the dashboard overlays
- ``json_report``: a long JSON report (the verification's diagnostics)
"""
