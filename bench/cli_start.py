"""How fast the ``watchkeeper`` command starts, and what each command imports.

Times, interleaved round by round (so a busy neighbour slows every command alike),
the wall time of ``python -c pass`` (the interpreter's own start, the baseline), and of
``watchkeeper --help``, ``watchkeeper preview SPEC``, ``watchkeeper preview --cron ...
--json`` and ``watchkeeper history --help`` (and ``watchkeeper list`` with ``--dsn``);
prints the median, min and max of each, the heavy packages each one imports (read from
``sys.modules`` at its exit), its slowest third-party imports (``-X importtime``), and
whether the start-time target is met.

Usage::

    .venv/bin/python bench/cli_start.py [--runs 15] [--warmup 2] [--target 0.3]
        [--spec examples/holdings_review.toml] [--dsn postgresql://...] [--against REV]
        [--instructions]

``--against REV`` also runs git revision REV's package (unpacked from ``git archive``
into a temporary directory, run as ``python -m watchkeeper`` with it on PYTHONPATH),
interleaved with this checkout's, to compare two versions on the same busy host.

``--dsn`` also times ``watchkeeper list --tenant bench`` against that database (it
applies pending migrations there first, as every database command does: give it a
scratch database).

``--instructions`` also counts the instructions each command executes, once, under
valgrind's callgrind (if installed): a figure a busy machine does not change, to compare
two versions on a shared host.

The commands run with ``PYTHONDONTWRITEBYTECODE`` unset, so that watchkeeper's modules
are read from cached bytecode as after ``pip install`` (an editable checkout under
``PYTHONDONTWRITEBYTECODE=1`` compiles them at every start instead); ``--as-is`` keeps
the environment.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("runtime", "triggers", "sources", "outbox")
"""Installed as watchkeeper.runtime, ... (pyproject's package-dir)."""
HEAVY = ("fastapi", "starlette", "uvicorn", "sse_starlette", "mcp", "pydantic_ai", "openai",
         "jinja2", "prometheus_client", "markdown_it", "asyncpg", "httpx", "pydantic_settings",
         "psutil", "pint", "croniter", "pydantic", "rich", "typer")
"""Packages worth naming when a command imports them (the last ones are needed by
preview: the unit registry, cron, the spec models, the CLI)."""

# Runs ``python -m watchkeeper ARGS`` and writes the modules imported by its end.
_PROBE = """
import json, runpy, sys
target, *args = sys.argv[1:]
sys.argv = ["watchkeeper", *args]
try:
    runpy.run_module("watchkeeper", run_name="__main__", alter_sys=True)
finally:
    with open(target, "w") as f:
        json.dump(sorted(sys.modules), f)
"""


def _command(python: str) -> list[str]:
    """The installed ``watchkeeper`` script next to ``python``, else ``python -m``."""
    script = Path(python).with_name("watchkeeper")
    return [str(script)] if script.exists() else [python, "-m", "watchkeeper"]


def _wall(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    return time.perf_counter() - start


def _imports(python: str, args: list[str], env: dict[str, str]) -> tuple[list[str], int]:
    """The heavy packages ``watchkeeper ARGS`` imports, and how many modules in all."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "modules.json"
        subprocess.run([python, "-c", _PROBE, str(target), *args], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        names = json.loads(target.read_text())
    roots = {name.split(".", 1)[0] for name in names}
    return [h for h in HEAVY if h in roots], len(names)


def _slowest(python: str, args: list[str], env: dict[str, str], top: int = 5) -> str:
    """The ``top`` third-party packages that took longest to import (cumulative, from
    ``-X importtime``), and the time spent in watchkeeper's own modules (self)."""
    result = subprocess.run([python, "-X", "importtime", "-m", "watchkeeper", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            check=False)
    best: dict[str, int] = {}
    own = 0
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        own_part, cumulative, name = line.removeprefix("import time:").split("|")
        if not cumulative.strip().isdigit():
            continue
        root = name.strip().split(".", 1)[0]
        if root == "watchkeeper":
            own += int(own_part)
        elif root not in sys.stdlib_module_names and not root.startswith("_"):
            best[root] = max(best.get(root, 0), int(cumulative))
    ranked = sorted(best.items(), key=lambda item: -item[1])[:top]
    return ("; ".join(f"{name} {micro / 1000:.0f} ms" for name, micro in ranked)
            + f"; watchkeeper's own modules {own / 1000:.0f} ms")


def _instructions(argv: list[str], env: dict[str, str]) -> int | None:
    """Instructions ``argv`` executes (callgrind's ``Collected``), or None without valgrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    result = subprocess.run([valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null",
                             *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, check=False)
    found = re.search(r"Collected : ([0-9]+)", result.stderr)
    return int(found.group(1)) if found else None


@dataclass
class Case:
    """One command line to time."""

    label: str
    args: list[str] | None  # watchkeeper's arguments; None: python -c pass
    argv: list[str]
    env: dict[str, str]
    targeted: bool


def _revision(rev: str) -> Path:
    """The package of git revision ``rev``, laid out as installed (the repository's
    top-level folders under ``watchkeeper/``), in a temporary directory for PYTHONPATH."""
    tree = Path(tempfile.mkdtemp(prefix="wk-cli-start-rev-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "watchkeeper", *FOLDERS],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    for folder in FOLDERS:
        (tree / folder).rename(tree / "watchkeeper" / folder)
    return tree


def main() -> None:
    """Run the bench and print its report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--target", type=float, default=0.3, help="seconds (median wall)")
    parser.add_argument("--spec", default=str(ROOT / "examples" / "holdings_review.toml"))
    parser.add_argument("--dsn", help="also time 'watchkeeper list' against this database")
    parser.add_argument("--against", metavar="REV",
                        help="also time git revision REV's package (python -m watchkeeper), "
                             "interleaved with this checkout's")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions under valgrind (slow; load-independent)")
    parser.add_argument("--as-is", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE if set (no bytecode cache)")
    options = parser.parse_args()

    python = sys.executable
    home = tempfile.mkdtemp(prefix="wk-cli-start-")
    options.spec = str(Path(options.spec).resolve())
    os.chdir(home)  # not the checkout: python -m and -c put the working directory first
    dropped = {"DATABASE_URL"} | (set() if options.as_is else {"PYTHONDONTWRITEBYTECODE"})
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["WATCHKEEPER_HOME"] = home
    commands: list[tuple[str, list[str], bool]] = [
        ("--help", ["--help"], True),
        (f"preview {Path(options.spec).name}", ["preview", options.spec], True),
        ("preview --cron ... --json",
         ["preview", "--cron", "0 9 * * 1", "--tz", "Europe/London", "--count", "20", "--json"],
         True),
        ("history --help", ["history", "--help"], True),
    ]
    if options.dsn:
        commands.append(("list (database)", ["list", "--tenant", "bench"], False))
    base = _command(python)
    cases = [Case("python -c pass", None, [python, "-c", "pass"], env, False)]
    for label, args, targeted in commands:
        run_env = {**env, "DATABASE_URL": options.dsn} if label.startswith("list") else env
        cases.append(Case(f"watchkeeper {label}", args, [*base, *args], run_env, targeted))
    if options.against:
        tree = _revision(options.against)
        for label, args, _ in commands:
            run_env = {**env, "PYTHONPATH": str(tree)}
            if label.startswith("list"):
                run_env["DATABASE_URL"] = options.dsn
            cases.append(Case(f"{options.against}: {label}", args,
                              [python, "-m", "watchkeeper", *args], run_env, False))

    for _ in range(options.warmup):
        for case in cases:
            _wall(case.argv, case.env)
    times: dict[str, list[float]] = {case.label: [] for case in cases}
    for _ in range(options.runs):
        for case in cases:
            times[case.label].append(_wall(case.argv, case.env))

    load = os.getloadavg()
    print(f"# watchkeeper CLI start, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {os.cpu_count()} cores; Python {platform.python_version()}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (after the runs)")
    print(f"{options.runs} runs per command, interleaved, after {options.warmup} warm-up "
          f"round(s); wall time, median (min-max); command: {' '.join(base)}"
          + (f"; {options.against}: {python} -m watchkeeper" if options.against else ""))
    print("bytecode: " + ("not cached (PYTHONDONTWRITEBYTECODE set)"
                          if env.get("PYTHONDONTWRITEBYTECODE") else "cached, as after pip install"))
    print()
    width = max(len(case.label) for case in cases)
    met = True
    for case in cases:
        values = times[case.label]
        median = statistics.median(values)
        line = (f"{case.label:<{width}}  {median * 1000:6.0f} ms  "
                f"({min(values) * 1000:.0f}-{max(values) * 1000:.0f} ms)")
        if case.targeted:
            ok = median <= options.target
            met = met and ok
            line += f"  {'<=' if ok else '> '} {options.target * 1000:.0f} ms"
        print(line)
    if options.instructions:
        print()
        counts = {case.label: _instructions(case.argv, case.env) for case in cases}
        base_count = counts[cases[0].label]
        for case in cases:
            count = counts[case.label]
            if count is None:
                print(f"{case.label:<{width}}  (valgrind not available)")
                continue
            ratio = f"  ({count / base_count:.1f}x python -c pass)" if base_count else ""
            print(f"{case.label:<{width}}  {count / 1e6:6.0f} M instructions{ratio}")
    print()
    for case in cases:
        if case.args is None:
            continue
        heavy, count = _imports(python, case.args, case.env)
        print(f"{case.label}: {count} modules; of the heavy ones: {', '.join(heavy) or 'none'}")
        print(f"    slowest imports: {_slowest(python, case.args, case.env)}")
    print()
    print(f"target (median <= {options.target * 1000:.0f} ms for --help, preview and "
          f"history --help): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
