"""The accuracy benchmark: generated programs, real-run labels, scoring (issue 7)."""
