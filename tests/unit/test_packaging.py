"""Every Python package of the source folders is listed in pyproject's `packages`.

The list is explicit (the user's layout maps cli/, importers/, kernels_runtime/ and cypher/ into the one
`htam_graph` namespace), so a new subpackage left out of it still imports from an editable install, as CI uses,
but is missing from a wheel or a `pip install .` such as the GPU machine's, which then fails at import time.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for package, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *relative.parts]))
    assert listed, "pyproject lists no packages"
    assert found - listed == set(), "packages missing from pyproject's list"
    assert listed - found == set(), "pyproject lists packages that do not exist"
