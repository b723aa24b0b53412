from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "corpus"


@pytest.fixture
def corpus_dir() -> Path:
    return CORPUS


def _shared_fixtures(item: pytest.Item) -> list[str]:
    """The module- or session-scoped fixtures of the item's own test module that it uses."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    module = getattr(item, "module", None)
    if module is None:
        return []
    return sorted(
        name
        for name in info.names_closure
        if any(
            fdef.scope in ("module", "session")
            and getattr(fdef.func, "__module__", None) == module.__name__
            for fdef in info.name2fixturedefs.get(name) or ()
        )
    )


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`-n N --dist loadgroup`), a module- or session-scoped fixture runs
    once per worker that needs it: the tests sharing one (a real gloo batch of 30-150 s) are
    one group, so it runs once. A test using two joins the group of the first."""
    for item in items:
        shared = _shared_fixtures(item)
        if shared and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(f"{item.module.__name__}::{shared[0]}"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Kill processes a failed real-run test left behind: multiprocessing joins its
    non-daemon children at exit, so one wedged rank would otherwise hang the whole run."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.kill()
        child.join(5)


def pytest_configure(config: pytest.Config) -> None:
    """`COMMLINT_TEST_CPU=<file>` turns on the CPU accounting of tests/cpu_profile.py."""
    import importlib.util
    import os

    plugin = Path(__file__).with_name("cpu_profile.py")
    # (a copy of this conftest elsewhere, as tests/test_xdist_groups.py makes, has none)
    if os.environ.get("COMMLINT_TEST_CPU") and plugin.is_file():
        spec = importlib.util.spec_from_file_location("commlint_test_cpu_profile", plugin)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        config.pluginmanager.register(module, "commlint-test-cpu-profile")
