"""Build hook for avalanche-tmc; all metadata lives in ``pyproject.toml``.

This file only adds ``avalanche_tmc_torchvision_fallback.pth`` to the wheel, at the top
of site-packages. Python runs that one line at start-up, so the torchvision fallback is
in place before *any* import of torchvision, including ``import avalanche`` before
``import avalanche_tmc`` (see ``avalanche_tmc_torchvision_fallback.py``: the hook only
acts when torchvision's compiled operators cannot load, e.g. PyPI's CUDA torchvision
next to a CPU-only torch). Editable installs do not get it from here: the Makefile
writes the same file into its virtual environment.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH_NAME = "avalanche_tmc_torchvision_fallback.pth"
PTH_LINE = "import avalanche_tmc_torchvision_fallback as f; f.install()\n"


class BuildPyWithPth(build_py):
    """``build_py`` that also writes the fallback's ``.pth`` file into the build tree."""

    def run(self):
        super().run()
        if not self.editable_mode:
            os.makedirs(self.build_lib, exist_ok=True)
            with open(os.path.join(self.build_lib, PTH_NAME), "w", encoding="utf-8") as f:
                f.write(PTH_LINE)

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs
        return outputs + [os.path.join(self.build_lib, PTH_NAME)]


setup(cmdclass={"build_py": BuildPyWithPth})
