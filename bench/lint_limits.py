"""The limits of `commlint check` on hostile source: how deep and how large a file it handles.

For each family of generated source (nested brackets, conditional-expression towers, long
`a + a + ...` chains, unary towers, attribute and subscript chains, lambdas, nested blocks) it
finds, by bisection, the largest size that commlint analyses (LibCST's parse and the extractor,
with commlint's own depth limit lifted), each probe in a child process so that a native crash
is seen as a signal; and the largest size CPython itself compiles. For file size it analyses
generated modules of growing size and prints time and peak memory per MB, with CPython's
`ast.parse` of the same text as the peer (same process tree, same load).

    python bench/lint_limits.py                     # everything
    python bench/lint_limits.py --quick --families plus,attr
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = "import torch.distributed as dist\nr = dist.get_rank()\n"

FAMILIES = {
    "nested parentheses": lambda n: "x = " + "(" * n + "1" + ")" * n,
    "nested calls f(f(...))": lambda n: "x = " + "f(" * n + "1" + ")" * n,
    "conditional expressions": lambda n: "x = " + "1 if r else " * n + "2",
    "a + a + ... terms": lambda n: "x = " + " + ".join(["a"] * n),
    "unary -(-(-a))": lambda n: "x = " + "-" * n + "a",
    "attribute chain a.b.b": lambda n: "x = a" + ".b" * n,
    "subscript chain a[0][0]": lambda n: "x = a" + "[0]" * n,
    "lambda: lambda: ...": lambda n: "x = " + "lambda: " * n + "1",
    "adjacent strings 'a' 'a'": lambda n: "x = (" + " ".join(["'a'"] * n) + ")",
    "nested if blocks": lambda n: (
        "".join("    " * i + "if r:\n" for i in range(n)) + "    " * n + "dist.barrier()"
    ),
}

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    sys.path.insert(0, sys.argv[1])
    mode = sys.argv[2]
    src = sys.stdin.buffer.read()
    t0 = time.process_time()
    if mode == "cpython":
        import ast, warnings
        warnings.simplefilter("ignore")
        try:
            ast.parse(src)
            ok, why = True, ""
        except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:
            ok, why = False, type(exc).__name__
    else:
        from commlint.lint.engine import Limits, extract
        limits = Limits(max_bytes=1 << 40, max_depth=1 << 30, time_limit=float(sys.argv[3]))
        ff = extract("x.py", "x", src, json.dumps({}), limits)
        problem = ff.not_analysed or ff.syntax_error
        ok, why = problem is None and ff.internal_error is None, (problem or ("", "", ""))[2]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"ok": ok, "why": why[:60], "cpu": time.process_time() - t0, "rss": rss}))
    """
)


def probe(src: str, mode: str, time_limit: float = 60.0) -> dict:
    """One child process; a signal or a timeout counts as a failure."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(ROOT), mode, str(time_limit)],
            input=src.encode(),
            capture_output=True,
            timeout=time_limit * 3 + 30,
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": "timeout", "cpu": float("nan"), "rss": float("nan")}
    if proc.returncode < 0:
        return {"ok": False, "why": f"signal {-proc.returncode}", "cpu": 0.0, "rss": 0.0}
    try:
        return json.loads(proc.stdout.decode().strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"ok": False, "why": proc.stderr.decode()[-60:], "cpu": 0.0, "rss": 0.0}


def largest(make, mode: str, lo: int, hi: int, steps: int) -> tuple[int, dict, dict]:
    """Bisection for the largest n in [lo, hi] that passes (assumes monotone failure)."""
    good, good_r = 0, {}
    first_bad = probe(HEADER + make(hi) + "\n", mode)
    if first_bad["ok"]:
        return hi, first_bad, {}
    bad_r = first_bad
    for _ in range(steps):
        if hi - lo <= max(1, lo // 50):
            break
        mid = (lo + hi) // 2
        r = probe(HEADER + make(mid) + "\n", mode)
        if r["ok"]:
            lo, good, good_r = mid, mid, r
        else:
            hi, bad_r = mid, r
    if not good:
        r = probe(HEADER + make(lo) + "\n", mode)
        good, good_r = (lo, r) if r["ok"] else (0, r)
    return good, good_r, bad_r


def depth_of(src: str) -> int:
    import ast

    from commlint.lint.names import Names  # the pre-check's walk measures the depth

    try:
        return Names(ast.parse(src)).depth
    except (SyntaxError, RecursionError, MemoryError):
        return -1


def module_of_size(mb: float) -> str:
    unit = textwrap.dedent(
        """
        def step_{k}(model, batch, rank):
            loss = model(batch).sum()
            if rank == 0:
                print("step", {k}, float(loss))
            dist.all_reduce(loss)
            for p in model.parameters():
                dist.all_reduce(p.grad)
            return loss
        """
    )
    parts, size, k = [HEADER], 0, 0
    while size < mb * 1e6:
        text = unit.format(k=k)
        parts.append(text)
        size += len(text)
        k += 1
    return "".join(parts)


def depth_n(make, target: int) -> int:
    """The smallest n whose syntax tree is at least `target` deep (bisection on ast only)."""
    lo, hi = 1, 8000
    while lo < hi:
        mid = (lo + hi) // 2
        d = depth_of(HEADER + make(mid) + "\n")
        if 0 <= d < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes")
    ap.add_argument(
        "--families", default="", help="comma-separated substrings of family names to run"
    )
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from commlint.lint.engine import MAX_BYTES, MAX_DEPTH

    wanted = [w for w in args.families.split(",") if w]
    print(f"commlint limits: MAX_DEPTH={MAX_DEPTH} (syntax-tree levels), MAX_BYTES={MAX_BYTES}")
    print(
        "per family: the largest n CPython compiles; commlint at the deepest n within its "
        "limit (analysed: cpu s, rss MB); commlint with its limit lifted at CPython's maximum"
    )
    print(
        f"{'family':28} {'cpython n':>9} {'n@limit':>7} {'cpu s':>6} {'rss MB':>6}  "
        f"{'ast cpu':>7} {'ratio':>6}  {'at cpython max (no limit)':>26}"
    )
    for name, make in FAMILIES.items():
        if wanted and not any(w in name for w in wanted):
            continue
        hi = 120 if "blocks" in name else 6000
        cp_n, _, _ = largest(make, "cpython", 1, hi, 14)
        at = min(cp_n, max(1, depth_n(make, MAX_DEPTH) - 1))
        src = HEADER + make(at) + "\n"
        ours, peer = probe(src, "commlint"), probe(src, "cpython")
        far = probe(HEADER + make(cp_n) + "\n", "commlint", 120.0) if cp_n > at else {}
        far_s = (
            f"{'ok' if far['ok'] else far['why'][:12]} {far['cpu']:.1f}s {far['rss']:.0f}MB"
            if far
            else "(same)"
        )
        ratio = ours["cpu"] / max(peer["cpu"], 1e-3)
        print(
            f"{name:28} {cp_n:>9} {at:>7} {ours['cpu']:>6.2f} {ours['rss']:>6.0f}  "
            f"{peer['cpu']:>7.3f} {ratio:>5.0f}x  {far_s:>26}"
            + ("" if ours["ok"] else f"  FAILED: {ours['why']}"),
            flush=True,
        )
    print()
    print(
        f"{'file size':>9} {'commlint cpu s':>14} {'rss MB':>7} {'MB rss/MB':>9} "
        f"{'ast.parse cpu s':>15} {'ratio':>6}"
    )
    base = probe(HEADER, "commlint")["rss"]
    for mb in (0.25, 0.5, 1.0) if args.quick else (0.25, 0.5, 1.0, 2.0):
        src = module_of_size(mb)
        ours = probe(src, "commlint", 600.0)
        peer = probe(src, "cpython")
        per_mb = (ours["rss"] - base) / mb
        ratio = ours["cpu"] / max(peer["cpu"], 1e-3)
        print(
            f"{mb:>7.2f}MB {ours['cpu']:>14.2f} {ours['rss']:>7.0f} {per_mb:>9.0f} "
            f"{peer['cpu']:>15.3f} {ratio:>5.0f}x  {'ok' if ours['ok'] else ours['why']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
