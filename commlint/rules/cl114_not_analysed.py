"""CL114: valid Python that commlint could not analyse; reported by the engine."""

from commlint.rules import Rule

RULE = Rule(
    code="CL114",
    name="not-analysed",
    summary="The file is valid Python but was too deep, too large or too slow to analyse.",
    explanation="""
CPython accepts the file, but `commlint check` could not analyse it, so none of its
communication was checked and calls into it from other files are treated as communicating
nothing. The finding says why, at the line that caused it:

- **too deeply nested**: an expression or statement nests deeper than the analysis walks
  safely (it recurses once per level), e.g. a generated `a + a + ... + a` line with thousands
  of terms or a tower of conditional expressions. Measured limits are in
  `bench/lint_limits.py`; the depth is counted on CPython's own syntax tree, which is the tree
  the analysis reads.
- **too large**: the file is over the size limit (2 MB).
- **too slow**: the analysis of the file ran past the per-file CPU time limit.
- **the parser crashed**: the process that analysed the file died from a signal; the other
  files were re-run and are reported as usual.

Generated code is the usual cause; it rarely communicates. A file CPython itself rejects is
CL100, not CL114.
""",
    severity="error",
    kind="source",
    fix="Split the expression or the file (or generate flatter code), or exclude the file "
    "(`exclude` in `[tool.commlint]`) if it does not communicate.",
    invalid=(
        "import torch.distributed as dist\n\n"
        "def step(t):\n"
        "    dist.all_reduce(t)\n"
        "    return " + " + ".join(["t"] * 1200) + "  # expect: CL114\n",
    ),
    valid=(
        """
import torch.distributed as dist

def step(t):
    dist.all_reduce(t)
    return sum([t] * 1200)
""",
    ),
)
