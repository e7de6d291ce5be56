"""pyproject.toml is the one source of dependencies; environment.yml must match it."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"torch": "pytorch"}  # PyPI name -> conda-forge name where they differ


def _name(spec: str) -> str:
    return re.split(r"[<>=!~ \[;]", spec.strip(), maxsplit=1)[0].lower()


def test_environment_yml_matches_pyproject():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = {CONDA_NAMES.get(_name(d), _name(d)): d for d in deps}
    lines = (ROOT / "environment.yml").read_text().splitlines()
    conda = {}
    deps_at = lines.index("dependencies:")
    for line in lines[deps_at:]:
        m = re.match(r"^  - ([A-Za-z][\w.-]*)(.*)$", line)
        if m and m.group(1) not in ("python", "pip"):
            conda[m.group(1).lower()] = m.group(2).strip()
    assert set(conda) == set(wanted), (set(conda) ^ set(wanted))
    for name, spec in wanted.items():  # same lower bounds
        assert conda[name] == spec[len(_name(spec)):].strip(), name
    assert any("-e .[dev]" in line for line in lines)
