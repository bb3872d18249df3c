"""Build script: only the list of native extensions lives here; metadata is in pyproject.toml.

The extensions are plain pybind11 modules that do not link against libtorch, so building
them needs neither torch nor a GPU toolchain, and the wheels work with any torch version.
"""

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

# Native CPU ops are added here (csrc/); each one ships a .pyi stub next to its module.
ext_modules: list[Pybind11Extension] = []

setup(ext_modules=ext_modules, cmdclass={"build_ext": build_ext})
