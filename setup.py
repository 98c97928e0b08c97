"""What goes into the wheel and the sdist, found from the tree, so no list kept by hand can
miss a new subpackage or data file: pgqueue and every package under it, and the CLI and the
alembic migrations under install names that cannot collide with other distributions'
(pgqueue_cli from cli/, pgqueue_migrations from migrations/), each with every file of its
folder that is not Python (SQL, templates, static files, frozen migration code, py.typed).
Everything else is in pyproject.toml."""
from __future__ import annotations

from pathlib import Path

from setuptools import find_namespace_packages, setup

HERE = Path(__file__).resolve().parent
#: Installed package name -> its folder in the repository.
ROOTS = {"pgqueue": "pgqueue", "pgqueue_cli": "cli", "pgqueue_migrations": "migrations"}


def _packages() -> tuple[list[str], dict[str, list[str]]]:
    """Every folder under ROOTS as a package (data-only folders too: static/, templates/,
    versions/code/), and each one's files that are not Python."""
    packages, data = [], {}
    for name, folder in ROOTS.items():
        for sub in ["", *find_namespace_packages(where=folder, exclude=["*__pycache__*"])]:
            package = f"{name}.{sub}" if sub else name
            where = HERE / folder / sub.replace(".", "/")
            packages.append(package)
            files = sorted(p.name for p in where.iterdir()
                           if p.is_file() and p.suffix not in (".py", ".pyc"))
            if files:
                data[package] = files
    return packages, data


PACKAGES, PACKAGE_DATA = _packages()

setup(
    packages=PACKAGES,
    package_dir={name: folder for name, folder in ROOTS.items() if name != folder},
    package_data=PACKAGE_DATA,
)
