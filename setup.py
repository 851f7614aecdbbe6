"""Build step of `pip install .`: configure and build the C library with CMake
(library only: no tests, no CLI), then copy libfusednorm.so into the package,
where fusednorm/_lib.py looks first. Metadata lives in pyproject.toml.

Environment: FUSEDNORM_CUDA=AUTO|ON|OFF (default AUTO: CUDA when nvcc is
found), CMAKE_ARGS (extra arguments to the configure step), CMAKE_BUILD_PARALLEL_LEVEL.
"""
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


def _cmake():
    # The `cmake` wheel from build-system.requires when the system one is older.
    try:
        import cmake  # noqa: F401

        return os.path.join(cmake.CMAKE_BIN_DIR, "cmake")
    except ImportError:
        return shutil.which("cmake") or "cmake"


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        build_dir = os.path.join(ROOT, "build", "python-wheel")
        cmake = _cmake()
        configure = [
            cmake, "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
            "-DFUSEDNORM_BUILD_TESTS=OFF", "-DFUSEDNORM_BUILD_TOOLS=OFF",
            f"-DFUSEDNORM_CUDA={os.environ.get('FUSEDNORM_CUDA', 'AUTO')}",
        ] + shlex.split(os.environ.get("CMAKE_ARGS", ""))
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.check_call(configure)
        subprocess.check_call([cmake, "--build", build_dir, "--target", "fusednorm", "-j", jobs])
        src = os.path.join(build_dir, "libfusednorm.so")
        dst_dir = os.path.join(self.build_lib, "fusednorm")
        os.makedirs(dst_dir, exist_ok=True)
        # copy2 follows the soname symlink: the package gets the real file.
        shutil.copy2(os.path.realpath(src), os.path.join(dst_dir, "libfusednorm.so"))
        print(f"fusednorm: built {src} -> {dst_dir}", file=sys.stderr)


class BinaryDistribution(Distribution):
    """The wheel carries a compiled library: platform-specific, not pure."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithCMake}, distclass=BinaryDistribution)
