"""The ``plugin-inspect`` console script of the installed package.

``pip install .`` puts the plugin-inspect executable inside the package (attnrt/bin/, beside
attnrt/lib/libattnrt.so and its plugins); this entry point replaces the Python process with it, so
its arguments, output and exit status are the tool's own.
"""
import os
import sys


def _executable():
    package = os.path.dirname(os.path.abspath(__file__))
    candidates = [
        os.path.join(package, "bin", "plugin-inspect"),  # installed package
        os.path.join(package, "..", "..", "bin", "plugin-inspect"),  # build/python/attnrt in place
    ]
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return os.path.normpath(path)
    return None


def main():
    executable = _executable()
    if executable is None:
        sys.stderr.write(
            "plugin-inspect: the executable is not in this attnrt package (looked for %s); "
            "reinstall attnrt with `pip install .` from the source tree\n"
            % os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "plugin-inspect"))
        return 127
    os.execv(executable, ["plugin-inspect"] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
