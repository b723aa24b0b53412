"""Pre-launch dry-run: run the user's real script once per simulated rank on CPU, record its
communication into a `Trace`, and check it. Importing this package does not import torch;
`commlint.plans.dryrun.driver` does.
"""
