#!/bin/sh
# Installs a built fusednorm into a scratch prefix, then builds and runs the
# README's C example against it three ways: pkg-config (shared), find_package
# with fusednorm::fusednorm and with fusednorm::fusednorm_static. Also checks
# that README.md shows exactly this example.
# usage: run.sh SOURCE_DIR BUILD_DIR C_COMPILER CMAKE
set -eu
src=$1 build=$2 cc=$3 cmake=${4:-cmake}
work=$(mktemp -d "${TMPDIR:-/tmp}/fusednorm-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }
for f in include/fusednorm.h; do test -f "$prefix/$f" || { echo "missing $f"; exit 1; }; done
libdir=$(dirname "$(find "$prefix" -name libfusednorm.a | head -n 1)")
for f in libfusednorm.a libfusednorm.so libfusednorm.so.0; do
    test -e "$libdir/$f" || { echo "missing $libdir/$f"; exit 1; }
done

# Built with hidden visibility, the library must still export its API.
if command -v nm >/dev/null 2>&1; then
    exported=$(nm -D --defined-only "$libdir/libfusednorm.so" | awk '{print $3}' | grep -c '^fusednorm_' || true)
    if [ "$exported" -lt 7 ]; then
        echo "libfusednorm.so exports $exported fusednorm_* functions, expected 7 (fwd, bwd, bwd_workspace_size,"
        echo "status_string, last_error, version, cuda_available): hidden visibility needs an export attribute"
        exit 1
    fi
fi

# The README's first ```c block must be this file, minus its opening comment.
if [ -f "$src/README.md" ]; then
    awk '/^```c$/{on=1; next} on && /^```$/{exit} on' "$src/README.md" >"$work/readme.c"
    sed '1,/\*\/$/d' "$src/tests_install/readme_example.c" >"$work/example_body.c"
    if ! diff -u "$work/example_body.c" "$work/readme.c"; then
        echo "README.md's C example differs from tests_install/readme_example.c"; exit 1
    fi
fi

echo "== pkg-config"
if command -v pkg-config >/dev/null 2>&1; then
    export PKG_CONFIG_PATH="$libdir/pkgconfig"
    pkg-config --modversion fusednorm
    # shellcheck disable=SC2046
    "$cc" -std=c11 -Wall -Wextra -Werror -o "$work/example_pc" "$src/tests_install/readme_example.c" \
        $(pkg-config --cflags --libs fusednorm)
    LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$work/example_pc"
    # A static link takes the private dependencies (OpenMP, cudart, libm).
    # shellcheck disable=SC2046
    "$cc" -std=c11 -o "$work/example_pc_static" "$src/tests_install/readme_example.c" \
        $(pkg-config --cflags fusednorm) "$libdir/libfusednorm.a" \
        $(pkg-config --static --libs fusednorm | sed 's/-lfusednorm\b//')
    "$work/example_pc_static"
else
    echo "pkg-config not found: skipped"
fi

echo "== find_package"
"$cmake" -S "$src/tests_install" -B "$work/consumer" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_PREFIX_PATH="$prefix" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
"$cmake" --build "$work/consumer" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
"$work/consumer/example_shared"
"$work/consumer/example_static"
echo "install test passed"
