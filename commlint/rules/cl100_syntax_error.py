"""CL100: the file could not be parsed; reported by the engine, not by an analysis."""

from commlint.rules import Rule

RULE = Rule(
    code="CL100",
    name="syntax-error",
    summary="The file is not valid Python (or not UTF-8), so it was not checked.",
    explanation="""
`commlint check` parses every file it is given. A file with a syntax error, or one that is not
valid UTF-8, cannot be analysed: none of its communication is checked, and calls into it from
other files are treated as communicating nothing. The finding points at the first error; the
other files are still checked.
""",
    severity="error",
    kind="source",
    fix="Fix the syntax error (run `python -m py_compile FILE` to see it), or exclude the file.",
    invalid=(
        """
import torch.distributed as dist

def step(t):
    dist.all_reduce(t
""",
    ),
    valid=(
        """
import torch.distributed as dist

def step(t):
    dist.all_reduce(t)
""",
    ),
)
