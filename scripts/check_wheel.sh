#!/usr/bin/env bash
# The built wheel installs and works in a fresh venv on a machine without Node.
#
# Builds the wheel from this checkout (the front end must already be built:
# jupyter_data_agent/labextension, as `pip install -e .` or `jlpm build:prod`
# leave it), creates a venv in a temporary folder, and — with a PATH that has
# no node, nodejs, npm, npx, yarn, corepack or jlpm, an empty environment
# and empty user-level Jupyter folders — installs the wheel with its
# dependencies from the package index (no extras: the base install must not
# need torch), then checks that the package imports, its CLI starts, and both
# the server extension and the prebuilt lab extension are enabled and OK.
# The runtime wheel holds no benchmark code: the benchmarks are a distribution
# of their own (bench/), whose wheel is built too, checked for its package data
# (the ARCADE notebooks) and installed on top; its command must start.
# Set KEEP_WHEEL_CHECK=1 to keep the temporary folder.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi

if [ ! -f jupyter_data_agent/labextension/package.json ]; then
  echo "the front end is not built (jupyter_data_agent/labextension): run jlpm build:prod first" >&2
  exit 1
fi

# pip warns about every index folder of this machine's pip config that does not exist
quiet_pip() { grep -v "is neither a file nor a directory" || true; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/jda-wheel-check.XXXXXX")
cleanup() { [ -n "${KEEP_WHEEL_CHECK:-}" ] || rm -rf "$WORK"; }
trap cleanup EXIT

echo "-- building the wheel"
python -m pip wheel -q --no-deps -w "$WORK/dist" . 2>&1 | quiet_pip
WHEEL=$(ls "$WORK"/dist/jupyter_data_agent-*.whl)
echo "$WHEEL"
python - "$WHEEL" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ["share/jupyter/labextensions/jupyter-data-agent/package.json",
        "share/jupyter/labextensions/jupyter-data-agent/install.json",
        "etc/jupyter/jupyter_server_config.d/jupyter_data_agent.json",
        "jupyter_data_agent/_version.py",
        # the shipped evidence estimator: the node model and the answer model Search's pick weighs
        "jupyter_data_agent/search/evidence_model.json", "jupyter_data_agent/search/answer_model.json"]
missing = [n for n in need if not any(x.endswith(n) for x in names)]
assert not missing, f"missing from the wheel: {missing}"
assert not any("/node_modules/" in n for n in names), "node_modules inside the wheel"
bench = [n for n in names if "bench" in n.lower()]
assert not bench, f"benchmark code in the runtime wheel (it belongs to bench/): {bench[:10]}"
top = {n.split("/")[0] for n in names}
other = sorted(t for t in top if t != "jupyter_data_agent" and not t.endswith((".dist-info", ".data")))
assert not other, f"top-level entries besides the package in the runtime wheel: {other}"
py = [n for n in names if n.startswith("jupyter_data_agent/") and n.endswith(".py")]
lines = sum(zipfile.ZipFile(sys.argv[1]).read(n).count(b"\n") for n in py)
print(f"{len(names)} files, shared data, version file and shipped models present, no benchmark code; "
      f"{len(py)} Python files, {lines} lines")
EOF

echo "-- building the benchmarks' wheel (bench/)"
python -m pip wheel -q --no-deps -w "$WORK/bench-dist" ./bench 2>&1 | quiet_pip
BENCH_WHEEL=$(ls "$WORK"/bench-dist/jupyter_data_agent_bench-*.whl)
echo "$BENCH_WHEEL"
python - "$BENCH_WHEEL" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
notebooks = [n for n in names if n.startswith("jupyter_data_agent_bench/notebooks/") and n.endswith(".ipynb")]
assert len(notebooks) >= 6, f"the ARCADE notebooks are missing from the bench wheel: {notebooks}"
for need in ("jupyter_data_agent_bench/cli.py", "jupyter_data_agent_bench/model_server.py",
             "jupyter_data_agent_bench/equivalence/__init__.py",
             "jupyter_data_agent_bench/equivalence_cases/__init__.py"):
    assert need in names, f"missing from the bench wheel: {need}"
assert not any(n.startswith("jupyter_data_agent/") for n in names), "runtime files in the bench wheel"
print(f"{len(names)} files, {len(notebooks)} notebooks")
EOF

echo "-- a PATH without Node"
SHADOW="$WORK/bin"
mkdir -p "$SHADOW"
IFS=: read -r -a dirs <<< "$PATH"
for dir in "${dirs[@]}"; do
  [ -d "$dir" ] || continue
  case "$dir" in "${VIRTUAL_ENV:-/nonexistent}"/*) continue ;; esac
  for exe in "$dir"/*; do
    name=$(basename "$exe")
    case "$name" in node | nodejs | npm | npx | yarn | yarnpkg | corepack | jlpm) continue ;; esac
    if [ -x "$exe" ] && [ ! -e "$SHADOW/$name" ]; then ln -s "$exe" "$SHADOW/$name"; fi
  done
done

mkdir -p "$WORK/home-config" "$WORK/home-data"
BASE_PYTHON=$(python -c "import sys; print(sys._base_executable)")
VENV="$WORK/venv"
# Only what pip needs to reach its index and cache; HOME keeps the user's pip config.
# Run from $WORK, so that `python -c` cannot import the checkout instead of the install.
clean() {
  (cd "$WORK" && exec env -i HOME="$HOME" PATH="$VENV/bin:$SHADOW" LANG=C.UTF-8 \
    ${PIP_INDEX_URL:+PIP_INDEX_URL="$PIP_INDEX_URL"} \
    ${PIP_EXTRA_INDEX_URL:+PIP_EXTRA_INDEX_URL="$PIP_EXTRA_INDEX_URL"} \
    ${PIP_FIND_LINKS:+PIP_FIND_LINKS="$PIP_FIND_LINKS"} \
    ${PIP_CERT:+PIP_CERT="$PIP_CERT"} PIP_DISABLE_PIP_VERSION_CHECK=1 \
    JUPYTER_CONFIG_DIR="$WORK/home-config" JUPYTER_DATA_DIR="$WORK/home-data" \
    JUPYTER_PLATFORM_DIRS=1 "$@")
}

if clean sh -c 'command -v node || command -v npm || command -v jlpm'; then
  echo "Node is still on the PATH of the clean environment" >&2
  exit 1
fi
echo "no node, npm or jlpm on the PATH"

echo "-- installing the wheel into a fresh venv"
clean "$BASE_PYTHON" -m venv "$VENV"
clean python -m pip install -q "$WHEEL" 2>&1 | quiet_pip
if clean python -c "import torch" 2>/dev/null; then
  echo "torch was installed by the base install" >&2
  exit 1
fi
if clean sh -c 'command -v node'; then
  echo "installing the wheel put node on the PATH" >&2
  exit 1
fi

echo "-- checks in the fresh venv"
clean python -c "
import sys, jupyter_data_agent as m
assert m.__version__ != '0.0.0.dev0', 'no _version.py in the wheel'
assert m.__file__.startswith(sys.prefix), m.__file__
print('jupyter_data_agent', m.__version__, 'from', m.__file__)"
clean jupyter-data-agent --help > /dev/null
if clean python -c "import jupyter_data_agent_bench" 2>/dev/null; then
  echo "the runtime wheel installed the benchmarks" >&2
  exit 1
fi
clean jupyter server extension list 2>&1 | tee "$WORK/server-ext.txt"
grep -qE "jupyter_data_agent.*enabled" "$WORK/server-ext.txt"
grep -qE "jupyter_data_agent .*OK" "$WORK/server-ext.txt"
clean jupyter labextension list 2>&1 | tee "$WORK/lab-ext.txt"
grep -qE "jupyter-data-agent .*enabled.*OK" "$WORK/lab-ext.txt"
grep -q "$VENV/share/jupyter/labextensions" "$WORK/lab-ext.txt"

echo "-- the benchmarks' wheel on top"
clean python -m pip install -q "$BENCH_WHEEL" 2>&1 | quiet_pip
clean jupyter-data-agent-bench --help > /dev/null
clean python -c "
import sys, jupyter_data_agent_bench.arcade as a
assert a.__file__.startswith(sys.prefix), a.__file__
n = len(a.load_suite())
assert n >= 6, n
print('jupyter_data_agent_bench: the built-in ARCADE suite,', n, 'notebooks')"
echo "wheel check passed"
