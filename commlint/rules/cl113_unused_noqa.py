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
what is located on its line, but is not judged: only the given files are.
""",
    severity="warning",
    kind="source",
    fix="Remove the code from the `# noqa` comment (or the whole comment).",
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
