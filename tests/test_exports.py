"""Every module of ``teleo_server`` declares its public names in ``__all__``."""

from __future__ import annotations

import importlib
import inspect
from collections import Counter
from pathlib import Path

import pytest

import teleo_server

_PACKAGE_DIR = Path(teleo_server.__file__).resolve().parent
_EXCLUDED = ("teleo_server._proto", "teleo_server.__main__")
# plugins register heads, spaces and profiles when imported: they are checked in a process of
# their own (test_plugin_modules_declare_all), so that this one's registries stay as shipped
PLUGIN_PACKAGE = "teleo_server.ext"


def _module_names() -> list[str]:
    names = []
    for path in sorted(_PACKAGE_DIR.rglob("*.py")):
        parts = ("teleo_server", *path.relative_to(_PACKAGE_DIR).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        name = ".".join(parts)
        if any(name == ex or name.startswith(ex + ".") for ex in _EXCLUDED):
            continue
        names.append(name)
    return names


ALL_MODULES = _module_names()
PLUGINS = [m for m in ALL_MODULES if m.startswith(PLUGIN_PACKAGE + ".")]
MODULES = [m for m in ALL_MODULES if m not in PLUGINS]


def _import(name: str):
    """The module, or a skip when it needs an optional dependency that is not installed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing == "teleo_server" or missing.startswith("teleo_server."):
            raise
        pytest.skip(f"{name} needs the optional dependency {missing!r}")


def test_modules_are_found():
    assert "teleo_server" in MODULES
    assert "teleo_server.server" in MODULES
    assert not any(m.startswith("teleo_server._proto") for m in MODULES)
    assert "teleo_server.__main__" not in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_module_declares_all(name):
    module = _import(name)
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    exported = list(module.__all__)
    assert all(isinstance(x, str) for x in exported), f"{name}.__all__ holds a non-string"

    dupes = sorted(x for x, n in Counter(exported).items() if n > 1)
    assert not dupes, f"{name}.__all__ lists {dupes} more than once"

    missing = sorted(x for x in exported if not hasattr(module, x))
    assert not missing, f"{name}.__all__ names {missing}, which the module does not have"

    defined = sorted(
        attr
        for attr, obj in vars(module).items()
        if not attr.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and getattr(obj, "__module__", None) == name
    )
    unlisted = sorted(set(defined) - set(exported))
    assert not unlisted, f"{name} defines public {unlisted} that __all__ does not list"


def test_gpu_modules_import_without_cupy():
    import subprocess
    import sys

    gpu = [m for m in MODULES if m == "teleo_server.gpu" or m.startswith("teleo_server.gpu.")]
    code = (
        "import importlib, sys\n"
        f"for m in {gpu!r}:\n"
        "    importlib.import_module(m)\n"
        "assert 'cupy' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_plugin_modules_declare_all():
    import subprocess
    import sys

    code = (
        "import importlib, inspect, sys\n"
        f"for name in {PLUGINS!r}:\n"
        "    try:\n"
        "        m = importlib.import_module(name)\n"
        "    except ModuleNotFoundError as exc:\n"
        "        print('skip', name, exc.name); continue\n"
        "    exported = set(m.__all__)\n"
        "    assert all(hasattr(m, x) for x in exported), name\n"
        "    defined = {a for a, o in vars(m).items() if not a.startswith('_') and (inspect.isfunction(o) or "
        "inspect.isclass(o)) and getattr(o, '__module__', None) == name}\n"
        "    assert defined <= exported, (name, sorted(defined - exported))\n"
        "    print('ok', name)\n"
    )
    assert PLUGINS, "the plugin package holds modules"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert all(f"ok {m}" in done.stdout or f"skip {m}" in done.stdout for m in PLUGINS)
