"""pyproject.toml is the one source of dependencies; environment.yml must match it exactly:
the dependencies, and every extra under its own "# extra: NAME" line."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"torch": "pytorch"}  # PyPI name -> conda-forge name where they differ


def _name(spec: str) -> str:
    return re.split(r"[<>=!~ \[;]", spec.strip(), maxsplit=1)[0].lower()


def _conda(specs: list[str]) -> dict[str, str]:
    """PyPI specs as conda ones: name -> version bounds."""
    return {CONDA_NAMES.get(_name(s), _name(s)): s.strip()[len(_name(s)):].strip() for s in specs}


def _environment_sections() -> dict[str, dict[str, str]]:
    """environment.yml's conda packages, by section: "dependencies", then one per extra."""
    lines = (ROOT / "environment.yml").read_text().splitlines()
    sections, current = {}, "dependencies"
    for line in lines[lines.index("dependencies:") + 1:]:
        extra = re.match(r"^  # extra: (\w+)$", line)
        if extra:
            current = extra.group(1)
            continue
        m = re.match(r"^  - ([A-Za-z][\w.-]*)(.*)$", line)
        if m and m.group(1) not in ("python", "pip"):
            sections.setdefault(current, {})[m.group(1).lower()] = m.group(2).strip()
    return sections


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {"dependencies": _conda(project["dependencies"]),
              **{name: _conda(specs) for name, specs in project["optional-dependencies"].items()}}
    assert _environment_sections() == wanted


def test_python_versions_agree():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    text = (ROOT / "environment.yml").read_text()
    assert project["requires-python"] == ">=3.11" and "  - python=3.11\n" in text
    assert "      - -e .\n" in text  # the kit itself, from the checkout
