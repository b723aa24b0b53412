"""CL113: a `# noqa: CL1xx` comment that suppresses nothing; reported by the engine."""

from commlint.rules import Rule

RULE = Rule(
    code="CL113",
    name="unused-noqa",
    summary="A `# noqa` comment names a commlint code that is not reported on its line.",
    explanation="""
Like ruff's RUF100: a suppression that no longer suppresses anything hides nothing today but
will silently hide the next real problem on that line. Only commlint codes (`CL...`) are
checked; codes of other tools are left alone, and so is a blanket `# noqa`. Only comments
count: `# noqa: CL101` inside a string literal (a test's source text) suppresses nothing and is
not reported. With project context (pre-commit), a context file's `# noqa` still suppresses
what is located on its line, but is not judged: only the given files are. A code that
`per-file-ignores` leaves out in the file is not enabled there, so it is not judged either.

One finding per comment names all its unused codes (`# noqa: CL101, CL999` on line 4
suppresses nothing ...), as ruff's RUF100. `commlint check --fix` takes exactly those codes
out of the comment (the whole comment when none is left) and leaves every other byte.
""",
    severity="warning",
    kind="source",
    fix="Remove the code from the `# noqa` comment (or the whole comment): "
    "`commlint check --fix` does it.",
    invalid=(
        """
import torch.distributed as dist

def step(t):
    dist.all_reduce(t)  # noqa: CL101
""",
    ),
    valid=(
        """
import torch.distributed as dist

def step(t, rank):
    if rank == 0:
        dist.all_reduce(t)  # noqa: CL101
""",
    ),
)
