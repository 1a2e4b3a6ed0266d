"""The wheel an application installs: one top-level package, ``watchkeeper``, that
works beside an application's own ``runtime.py`` and ``sources/``; and the package
boundaries, checked by import-linter on the wheel's own layout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("runtime", "triggers", "sources", "outbox")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The project's wheel, built once from a copy of this checkout's package folders (a
    build in place would reuse setuptools' stale build/ directory; no build isolation:
    the test extra pins setuptools)."""
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "MANIFEST.in"):
        shutil.copy2(ROOT / name, source / name)
    for folder in ("watchkeeper", *FOLDERS):
        shutil.copytree(ROOT / folder, source / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--quiet", "--wheel-dir", str(out), str(source)], check=True,
                   capture_output=True, cwd=out)
    (found,) = out.glob("watchkeeper-*.whl")
    yield found


@pytest.fixture(scope="module")
def unpacked(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel's files, as an installer would lay them out in site-packages."""
    target = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)
    return target


def test_wheel_has_one_top_level_package(wheel: Path) -> None:
    """Every file of the wheel is under watchkeeper/ or its .dist-info; top_level.txt
    names watchkeeper alone."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n for n in names if n.endswith(".dist-info/RECORD")).rsplit("/", 1)[0]
        top = {n.split("/", 1)[0] for n in names}
        assert top == {"watchkeeper", info}
        assert archive.read(f"{info}/top_level.txt").decode().split() == ["watchkeeper"]
    for folder in FOLDERS:
        assert f"watchkeeper/{folder}/__init__.py" in names
    assert "watchkeeper/runtime/store/sql/queries.sql" in names
    assert "watchkeeper/runtime/store/sql/migrations/0001_foundation.sql" in names
    assert "watchkeeper/__main__.py" in names
    assert "watchkeeper/runtime/doors/page/templates/base.html" in names
    assert "watchkeeper/runtime/doors/page/static/page.css" in names


def test_every_package_folder_is_listed() -> None:
    """pyproject's package list names each folder with an __init__.py under the four
    top-level folders (else setuptools would silently leave it out of the wheel)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {"watchkeeper"}
    for folder in FOLDERS:
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT).parts
            found.add(".".join(("watchkeeper", *parts)))
    assert listed == found
    assert config["package-dir"] == {"watchkeeper": "watchkeeper",
                                     **{f"watchkeeper.{f}": f for f in FOLDERS}}


def test_installed_wheel_lives_beside_an_apps_runtime_and_sources(
        wheel: Path, tmp_path: Path) -> None:
    """In a fresh venv, an app with its own runtime.py and sources/ imports both its
    modules and watchkeeper's, and ``python -m watchkeeper --help`` works."""
    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                           "'purelib'))"], check=True, capture_output=True, text=True).stdout.strip()
    # the dependencies come from this test environment's site-packages, appended after
    # the fresh venv's own (a plain path: its .pth files, the editable finder
    # included, are not processed)
    Path(site, "zz_test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    app = tmp_path / "app"
    (app / "sources").mkdir(parents=True)
    (app / "runtime.py").write_text("WHO = 'the app runtime'\n")
    (app / "sources" / "__init__.py").write_text("WHO = 'the app sources'\n")
    code = ("import runtime, sources, watchkeeper, watchkeeper.runtime, watchkeeper.sources\n"
            "from watchkeeper import Supervisor, propose, Source, Spec\n"
            "print(runtime.WHO, '|', sources.WHO, '|', watchkeeper.sources.Source.__module__,"
            f" '|', watchkeeper.__file__.startswith({site!r}))")
    result = subprocess.run([str(python), "-c", code], cwd=app, check=True,
                            capture_output=True, text=True)
    assert result.stdout.split(" | ") == ["the app runtime", "the app sources",
                                          "watchkeeper.sources._base", "True\n"]
    shown = subprocess.run([str(python), "-m", "watchkeeper", "--help"], cwd=app,
                           capture_output=True, text=True, check=True)
    assert "propose" in shown.stdout and "Usage: python -m watchkeeper" in shown.stdout


def test_package_boundaries(unpacked: Path) -> None:
    """import-linter on the wheel's layout: triggers imports nothing of ours nor any
    I/O; sources and outbox never import runtime; runtime's rooms point down (doors ->
    use cases -> engine -> store); a door reaches store and engine only through the use
    cases and the front door; the MCP door never imports the CLI."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint), str(ROOT / "pyproject.toml"), "--no-cache"],
                            cwd=unpacked, env={"PYTHONPATH": str(unpacked), "PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "7 kept, 0 broken" in result.stdout
