"""The ``cairn`` command line (typer + rich)."""
