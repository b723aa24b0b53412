from commlint.cli import entry

entry()
