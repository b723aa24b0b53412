"""Which files `commlint check` covers: the Python files under the given paths (skipping
tool and environment folders and what `exclude` hides from the report), the project
context (the files connected to the given ones by imports), and the lines `--diff REF`
changed.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import subprocess
from pathlib import Path

from commlint.findings import InputError
from commlint.lint.config import LintConfig

SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        "node_modules",
        "build",
        "dist",
        ".commlint_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        "site-packages",
        ".eggs",
    }
)


# ------------------------------------------------------------------ discovery
def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _stat(path: str) -> tuple[os.stat_result | None, str | None]:
    """os.stat (following links) or why it failed, in words; never opens the file."""
    try:
        return os.stat(path), None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, "symbolic link loop; skipped"
        if exc.errno == errno.ENOENT and os.path.islink(path):
            return None, "broken symbolic link; skipped"
        if exc.errno == errno.ENOENT:
            return None, "No such file or directory"
        return None, f"cannot read: {exc.strerror}; skipped"


def discover(paths: list[str], config: LintConfig) -> tuple[list[Path], list[InputError], set[str]]:
    """Python files under `paths`, the input errors met (missing paths, symlink loops, FIFOs and
    devices, which are never opened), and which files `exclude` matches: those are still
    analysed, so that their functions are summarised for callers, but never reported."""
    files: list[Path] = []
    errors: list[InputError] = []
    excluded: set[str] = set()
    excludes = config.exclude
    for raw in paths:
        st, why = _stat(raw)
        if st is None:
            errors.append(InputError(path=raw, message=why or "cannot read"))
            continue
        if stat.S_ISREG(st.st_mode):
            files.append(Path(raw))
            continue
        if not stat.S_ISDIR(st.st_mode):
            errors.append(InputError(path=raw, message=f"{_kind(st.st_mode)}; skipped"))
            continue
        hidden_dirs: dict[str, bool] = {}
        for dirpath, dirnames, filenames in os.walk(raw):
            dirnames[:] = sorted(
                d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info")
            )
            hidden = dirpath != raw and (
                hidden_dirs.get(os.path.dirname(dirpath), False)
                or _excluded(Path(dirpath), excludes, config.root)
            )
            hidden_dirs[dirpath] = hidden
            for name in sorted(filenames):
                if not name.endswith(".py"):
                    continue
                fp = Path(dirpath, name)
                st, why = _stat(str(fp))
                out = hidden or _excluded(fp, excludes, config.root)
                if st is not None and stat.S_ISREG(st.st_mode):
                    files.append(fp)
                    if out:
                        excluded.add(str(fp))
                elif not out:
                    if st is not None:
                        why = f"{_kind(st.st_mode)}; skipped"
                    errors.append(InputError(path=str(fp), message=why or "cannot read"))
    seen: dict[str, Path] = {}
    for f in files:
        seen.setdefault(str(f), f)
    return list(seen.values()), errors, excluded


def _excluded(path: Path, patterns: list[str], root: Path) -> bool:
    if not patterns:
        return False
    try:
        rel = path.resolve().relative_to(root)
    except (ValueError, OSError, RuntimeError):  # outside the root; a symlink loop
        rel = path
    text = rel.as_posix()
    return any(
        rel.match(p)
        or path.name == p
        or text == p.rstrip("/")
        or text.startswith(p.rstrip("/") + "/")
        for p in patterns
    )


# ------------------------------------------------------------------ project context
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
MAX_CONTEXT_FILES = 20_000


def project_root(path: Path) -> Path | None:
    """The nearest folder above `path` that holds a project marker (pyproject.toml, .git…)."""
    start = path.resolve().parent
    for folder in (start, *start.parents):
        if any((folder / m).exists() for m in PROJECT_MARKERS):
            return folder
    return None


_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+\(?([\w., \t]*)|import[ \t]+([\w., \t]+))",
    re.M,
)
CONTEXT_DEPTH = 3


def _dotted(f: Path, root: Path) -> str:
    parts = list(f.relative_to(root).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(f: Path, dotted: str, text: str) -> set[str]:
    """Dotted names a file imports (`from a.b import c` gives a.b and a.b.c; relative imports
    resolved against the file's package)."""
    out: set[str] = set()
    package = dotted.split(".") if f.name == "__init__.py" else dotted.split(".")[:-1]
    for m in _IMPORT.finditer(text):
        base, names, plain = m.group(1), m.group(2), m.group(3)
        if plain is not None:
            out.update(n.split(" as ")[0].strip() for n in plain.split(",") if n.strip())
            continue
        dots = len(base) - len(base.lstrip("."))
        mod = base.lstrip(".")
        if dots:
            up = package[: len(package) - (dots - 1)] if dots - 1 <= len(package) else []
            mod = ".".join([*up, mod] if mod else up)
        if mod:
            out.add(mod)
        for n in (names or "").split(","):
            n = n.split(" as ")[0].strip()
            if n and n != "*":
                out.add(f"{mod}.{n}" if mod else n)
    return out


class _Project:
    """A project's Python files by resolved path, their dotted module names and imports."""

    def __init__(self, root: Path, found: list[Path], skip: set[str]) -> None:
        self.by_path: dict[str, Path] = {}
        self.dotted: dict[str, str] = {}
        self.suffix: dict[str, list[str]] = {}  # every dotted suffix of a module -> files
        self.texts: dict[str, str] = {}
        for f in found:
            key = str(f.resolve())
            if key in skip:
                continue
            self.by_path[key] = f
            name = _dotted(Path(key), root)
            self.dotted[key] = name
            bits = name.split(".")
            for k in range(len(bits)):
                self.suffix.setdefault(".".join(bits[k:]), []).append(key)

    def text(self, key: str) -> str:
        if key not in self.texts:
            try:
                self.texts[key] = self.by_path[key].read_text(
                    encoding="utf-8-sig", errors="replace"
                )
            except OSError:
                self.texts[key] = ""
        return self.texts[key]

    def imported(self, key: str) -> set[str]:
        hits: set[str] = set()
        for name in _imports(Path(key), self.dotted[key], self.text(key)):
            hits.update(self.suffix.get(name, ()))
        return hits

    def connected(self, given: list[str]) -> tuple[set[str], set[str]]:
        """`given`, what they import (a few levels deep) and what imports them (two up);
        and those importers alone."""
        keep: set[str] = set(given)
        importers: set[str] = set()
        frontier = set(given)
        for _ in range(CONTEXT_DEPTH):
            frontier = {h for k in frontier for h in self.imported(k)} - keep
            keep |= frontier
        targets = set(given)
        for _ in range(2):
            stems = {self.dotted[k].rsplit(".", 1)[-1] for k in targets if self.dotted[k]}
            if not stems:
                break
            word = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(stems))) + r")\b")
            targets = {
                k
                for k in self.by_path
                if k not in keep and word.search(self.text(k)) and self.imported(k) & targets
            }
            keep |= targets
            importers |= targets
        return keep, importers


def _small_tree(root: Path) -> bool:
    """At most MAX_CONTEXT_FILES Python files below `root` (counting stops there): a larger
    tree is a home folder or a monorepo root, where files given alone are checked alone."""
    count = 0
    for _dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith(".")]
        count += sum(name.endswith(".py") for name in filenames)
        if count > MAX_CONTEXT_FILES:
            return False
    return True


def _git_ignored(root: Path, found: list[Path]) -> set[str]:
    """The files of `found` that git ignores in the repository at `root` (as ruff leaves
    what .gitignore names out); nothing when `root` is not a git work tree or git is missing."""
    if not (root / ".git").exists() or not found:
        return set()
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "check-ignore", "--stdin", "-z"],
            input="\0".join(str(f) for f in found) + "\0",
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    if proc.returncode not in (0, 1):  # 1: nothing ignored
        return set()
    return {x for x in proc.stdout.split("\0") if x}


def project_context(
    files: list[Path], config: LintConfig, texts: dict[str, str] | None = None
) -> tuple[list[Path], set[str], set[str]]:
    """`files` plus the files of their projects they are connected to by imports: what they
    import (and what that imports, a few levels deep) and what imports them (two levels up).
    pre-commit passes only the changed files, but a hang can be located in one file and caused
    in another: a rank-0-only call of an unchanged helper that all-reduces, or a changed
    helper that now all-reduces under an unchanged caller's rank test. The added files are
    analysed (and cached) but reported only through the given ones. Returns the files, the
    added ones, and the added ones that import a given file (where a finding can be caused).
    `texts`: the source of a given file by resolved path when it is not the file on disk
    (standard input: an editor's unsaved buffer)."""
    here = Path.cwd().resolve()
    roots = {
        r
        for r in (project_root(f) for f in files)
        # the project being worked on (pre-commit runs in the repository's root), not a
        # library's files checked from elsewhere
        if r is not None
        and (r == here or here in r.parents or r in here.parents)
        and _small_tree(r)
    }
    have = {str(f.resolve()) for f in files}
    out = list(files)
    context: set[str] = set()
    callers: set[str] = set()
    for root in sorted(roots):
        found, _errors, excluded = discover([str(root)], config)
        ignored = _git_ignored(root, found)
        if ignored:  # what git ignores is not the project (build output, downloads, venvs)
            found = [f for f in found if str(f) not in ignored or str(f.resolve()) in have]
        skip = {str(f.resolve()) for f in found if str(f) in excluded} - have
        project = _Project(root, found, skip)
        project.texts.update(texts or {})
        given = [k for k in (str(f.resolve()) for f in files) if k in project.by_path]
        keep, importers = project.connected(given)
        for key in sorted(keep - have):
            have.add(key)
            out.append(project.by_path[key])
            context.add(str(project.by_path[key]))
            if key in importers:
                callers.add(str(project.by_path[key]))
    return out, context, callers


HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def changed_lines(ref: str, paths: list[str]) -> tuple[dict[str, set[int]], str | None]:
    """Lines added or changed since `ref` (`git diff -U0 REF`), per absolute path."""
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        ).stdout.strip()
        proc = subprocess.run(
            ["git", "diff", "-U0", "--no-color", "--no-ext-diff", ref, "--", *paths],
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        return {}, f"--diff needs a git work tree: {exc}"
    if proc.returncode != 0:
        msg = (proc.stderr.strip().splitlines() or ["git diff failed"])[0]
        return {}, f"--diff {ref}: {msg}"
    out: dict[str, set[int]] = {}
    current: set[int] | None = None
    for line in proc.stdout.splitlines():
        if line.startswith("+++ "):
            name = line[4:]
            if name == "/dev/null":
                current = None
                continue
            name = name[2:] if name.startswith("b/") else name
            current = out.setdefault(str((Path(top) / name).resolve()), set())
        elif line.startswith("@@") and current is not None:
            m = HUNK.match(line)
            if m:
                start, count = int(m.group(1)), int(m.group(2) or 1)
                current.update(range(start, start + count))
    # untracked files are new: every line counts
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "--full-name", "--", *paths],
        capture_output=True,
        text=True,
    )
    for name in untracked.stdout.splitlines():
        p = str((Path(top) / name).resolve())
        try:
            with open(p, encoding="utf-8", errors="replace") as fh:
                n = sum(1 for _ in fh)
        except OSError:
            continue
        out[p] = set(range(1, n + 1))
    return out, None
