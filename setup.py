"""Build script: only the list of native extensions lives here; metadata is in pyproject.toml.

The extensions are plain pybind11 modules that do not link against libtorch, so building
them needs neither torch nor a GPU toolchain, and the wheels work with any torch version.
"""

import os
import platform
import sys

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

# The start-up hook: a .pth file at the top of site-packages, which Python runs in every
# process. Its one line imports _accel_startup (a top-level module, so that a start-up
# imports nothing of accel), which watches for Lightning's and, with ACCEL_DEEPSPEED=1,
# DeepSpeed's import (docs/frameworks.md, docs/deepspeed.md).
STARTUP_PTH = "accel-startup.pth"


class BuildPyWithStartupHook(build_py):
    """Puts the start-up .pth file at the root of the wheel (site-packages), beside
    _accel_startup.py."""

    def run(self):
        super().run()
        self.copy_file(STARTUP_PTH, os.path.join(self.build_lib, STARTUP_PTH))


class EditableWheelWithStartupHook(editable_wheel):
    """Editable installs (pip install -e) get the .pth file too, so tests see what users see.

    setuptools writes everything in the unpacked directory into the editable wheel; its
    hook for namespace packages is the one place that directory is handed out. The .pth
    imports _accel_startup through the editable install's own finder, which its .pth
    (``__editable__.accel-*.pth``) installs first: site.py runs .pth files in name order.
    """

    def _install_namespaces(self, installation_dir, pth_prefix):
        super()._install_namespaces(installation_dir, pth_prefix)
        self.copy_file(STARTUP_PTH, os.path.join(installation_dir, STARTUP_PTH))


# -fno-math-errno lets gcc vectorise sqrtf (an Adam kernel runs ~4x slower without it), and
# -fno-trapping-math lets it vectorise loops that select between float results (half.h's
# conversions): nothing here enables floating-point traps, and no result changes.
# No -march=native: the kernels are compiled per instruction-set level and picked at run
# time (csrc/common/simd.h).
# OpenMP links the system libgomp.so.1, the soname torch's wheel ships, so both share one
# runtime in a process instead of fighting over the cores.
UNIX_FLAGS = [
    "-O3",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-fopenmp",
    "-Wall",
    "-Wextra",
    "-fvisibility=hidden",
]

# Every extension includes these; a change to one rebuilds both.
COMMON_HEADERS = [
    "csrc/common/bindings.h",
    "csrc/common/convert.h",
    "csrc/common/dtypes.h",
    "csrc/common/half.h",
    "csrc/common/simd.h",
    "csrc/common/vec.h",
    "csrc/common/vec_level.inc",
]

ext_modules = []
if sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64"):
    ext_modules.append(
        Pybind11Extension(
            "accel.ops._shm_comm",
            ["csrc/shm_comm/shm_comm.cpp"],
            depends=[*COMMON_HEADERS, "csrc/shm_comm/sum2_f32.h"],
            cxx_std=17,
            extra_compile_args=[flag for flag in UNIX_FLAGS if flag != "-fopenmp"],
        )
    )
    ext_modules.append(
        Pybind11Extension(
            "accel.ops._cpu_optim",
            ["csrc/cpu_optim/cpu_optim.cpp", "csrc/cpu_optim/step_channel.cpp"],
            depends=[
                *COMMON_HEADERS,
                "csrc/cpu_optim/adam_level.inc",
                "csrc/cpu_optim/adam_levels.h",
                "csrc/cpu_optim/adam_scalars.h",
                "csrc/cpu_optim/hyperparameters.h",
                "csrc/cpu_optim/step_channel.h",
            ],
            cxx_std=17,
            extra_compile_args=UNIX_FLAGS,
            extra_link_args=["-fopenmp"],
        )
    )

setup(
    ext_modules=ext_modules,
    cmdclass={
        "build_ext": build_ext,
        "build_py": BuildPyWithStartupHook,
        "editable_wheel": EditableWheelWithStartupHook,
    },
)
