"""Subcommands of the `commlint` CLI, one module each (see commlint.cli.COMMANDS)."""
