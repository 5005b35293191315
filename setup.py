"""The wheel carries the repository's data folders (``corpus/``, ``snapshots/``, ``protocol/``)
as package data under ``specgate/_data/``, where ``impl/datafiles.py`` finds them in an
installed package; a checkout and its editable install read the folders in place. Everything
else about the build is in pyproject.toml."""

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, str(Path(__file__).resolve().parent))
from impl.datafiles import DATA_FOLDERS


class BuildWithData(build_py):
    """``build_py``, then the data folders copied into the build's ``specgate/_data``."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's own folders
            return
        for name in DATA_FOLDERS:
            target = Path(self.build_lib) / "specgate" / "_data" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(name, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithData})
