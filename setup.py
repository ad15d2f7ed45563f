"""Builds the Python package `gang` for pip with the project's CMake build.

setuptools lays out the Python files (python/gang); the build_ext step
configures CMake with GANG_PYTHON_WHEEL=ON, builds the target gang_wheel
(the extensions, libgang, gang-baby, the tools) and installs its component
"wheel" into the package directory. The version is the one of
include/gang/version.h, as everywhere else.
"""

import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(HERE, "include", "gang", "version.h")) as f:
        text = f.read()
    parts = [re.search(r"#define GANG_VERSION_%s (\d+)" % p, text).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


class CMakeBuild(build_ext):
    """Replaces the compile of the placeholder extension with the CMake
    build of everything the package carries."""

    def run(self):
        if self.inplace:
            sys.exit("gang: an editable install (pip install -e) is not "
                     "supported: build with CMake and put <build>/python on "
                     "PYTHONPATH (docs/python.md)")
        build = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        stage = os.path.abspath(os.path.join(self.build_temp, "stage"))
        shutil.rmtree(stage, ignore_errors=True)
        cmake = os.environ.get("CMAKE", "cmake")
        jobs = os.environ.get("GANG_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call([
            cmake, "-S", HERE, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
            "-DGANG_PYTHON=ON", "-DGANG_PYTHON_WHEEL=ON",
            "-DGANG_BUILD_TESTS=OFF", "-DPython3_EXECUTABLE=" + sys.executable,
        ])
        subprocess.check_call([cmake, "--build", build, "--target",
                               "gang_wheel", "-j", jobs])
        subprocess.check_call([cmake, "--install", build, "--component",
                               "wheel", "--prefix", stage])
        pkg = os.path.join(stage, "wheel", "gang")
        # A wheel holds no symlinks: libgang.so.0 (the soname the
        # extensions ask for) becomes the library itself, not a copy of it.
        for name in os.listdir(pkg):
            link = os.path.join(pkg, name)
            if os.path.islink(link):
                os.replace(os.path.realpath(link), link)
        dest = os.path.join(os.path.abspath(self.build_lib), "gang")
        shutil.copytree(pkg, dest, dirs_exist_ok=True)


setup(
    version=version(),
    packages=["gang"],
    package_dir={"gang": "python/gang"},
    # A placeholder: it makes the wheel a platform wheel and runs
    # CMakeBuild, which builds the real extensions.
    ext_modules=[Extension("gang._gang", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
