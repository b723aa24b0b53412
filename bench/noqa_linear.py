"""`# noqa` comments of many codes: `commlint check`, `--fix` and `--add-noqa` must stay linear.

One file whose rank-0-only barrier carries a `# noqa:` of N codes, three ways: N distinct
commlint codes (N - 19 unknown: one CL113), N codes of other tools (ignored), N copies of
CL101 (used). Each line: CPU seconds for the whole lint in process (imports and parser warm,
median of 3), the same file with the comment's `noqa` renamed (the cost of the text alone), and
the two edits on the text.

    python bench/noqa_linear.py                 # N = 100,000
    python bench/noqa_linear.py --codes 10000 100000 200000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

HEAD = (
    "import torch.distributed as dist\n\n\ndef f(t):\n"
    "    if dist.get_rank() == 0:\n        dist.barrier()  # noqa: "
)


def cpu(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codes", type=int, nargs="+", default=[100_000])
    args = ap.parse_args()

    from commlint.lint.config import load_config
    from commlint.lint.engine import LintOptions, lint_paths
    from commlint.lint.noqa import add_noqa, remove_noqa_codes

    folder = Path(tempfile.mkdtemp(prefix="noqa_linear_"))
    cfg = load_config([str(folder)])

    def lint(path: Path) -> int:
        return len(lint_paths([str(path)], cfg, LintOptions(cache=False)).findings)

    print(f"{'codes':>8} {'kind':8} {'lint':>7} {'no noqa':>8} {'--fix edit':>10} {'add edit':>9}")
    for n in args.codes:
        kinds = {
            "commlint": [f"CL{100 + k}" for k in range(n)],
            "foreign": [f"X{k}" for k in range(n)],
            "same": ["CL101"] * n,
        }
        for kind, codes in kinds.items():
            text = HEAD + ", ".join(codes) + "\n"
            path = folder / f"{kind}_{n}.py"
            path.write_text(text, encoding="utf-8")
            plain = folder / f"{kind}_{n}_plain.py"
            plain.write_text(text.replace("# noqa: ", "# note: "), encoding="utf-8")
            lint(path)  # warm: imports, the parser
            with_noqa, without = cpu(lambda p=path: lint(p)), cpu(lambda p=plain: lint(p))
            drop = {6: set(codes) - {"CL101"}}
            fix = cpu(lambda t=text, d=drop: remove_noqa_codes(t, d))
            add = cpu(lambda t=text: add_noqa(t, {6: {"CL99"}}))
            verdict = "met" if max(with_noqa, fix, add) <= 1.0 else "NOT met"
            print(
                f"{n:>8} {kind:8} {with_noqa:>6.3f}s {without:>7.3f}s {fix:>9.3f}s {add:>8.3f}s"
                f"  ({with_noqa / max(without, 1e-3):.1f}x the file without the comment;"
                f" goal <= 1 s: {verdict})"
            )


if __name__ == "__main__":
    main()
