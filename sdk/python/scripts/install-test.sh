#!/usr/bin/env bash
# sdk/python/scripts/install-test.sh (make sdk-test): installs kvgate-sdk into
# fresh virtual environments the ways a user would and runs tests/test_sdk.py
# (which also runs the README's streaming example) against a live kvgate with
# each, importing the installed package, never src/:
#
#   path   pip install sdk/python                     grpcio, protobuf: requirements-latest.txt
#   wheel  pip install kvgate_sdk-*.whl               requirements-floor.txt
#   sdist  pip install kvgate_sdk-*.tar.gz            requirements-latest.txt
#
# The wheel and the sdist come from `python -m build` (requirements-build.txt)
# on a copy of the folder as a fresh clone has it. PYTHON (default python3)
# makes the path and sdist environments, PYTHON_FLOOR (default PYTHON) the
# wheel one: CI can give it the oldest Python supported (3.10). Environments
# live in KVGATE_CACHE/sdk-python-install-test (outside the clone), made anew
# each run; pip's cache makes warm runs fast. KVGATE_BIN is the binary.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$here/../.." && pwd)
export KVGATE_BIN=${KVGATE_BIN:-$repo/bin/kvgate}
python=${PYTHON:-python3}
python_floor=${PYTHON_FLOOR:-$python}
work=${KVGATE_CACHE:-$HOME/.cache/kvgate}/sdk-python-install-test
rm -rf "$work"
mkdir -p "$work"

pip_quiet=(--quiet --disable-pip-version-check --no-input)

# venv NAME PYTHON: a fresh virtual environment, with the pip that PYTHON
# bundles (the one a user has); prints its python.
venv() {
	"$2" -m venv "$work/$1"
	echo "$work/$1/bin/python"
}

# run_tests NAME PYTHON: the SDK's tests with that environment's kvgate-sdk.
run_tests() {
	local from
	from=$(cd "$work" && "$2" -c 'import kvgate.v1.router_pb2 as m, grpc, google.protobuf as pb; print(m.__file__, "grpcio", grpc.__version__, "protobuf", pb.__version__)')
	case $from in
	"$work/$1/"*) ;;
	*) echo "install-test: $1: kvgate.v1 comes from $from, not from the environment" >&2; exit 1 ;;
	esac
	echo "install-test: $1: $("$2" --version), $from"
	(cd "$here" && "$2" -m unittest discover -s tests)
	echo "install-test: $1: ok"
}

# A copy of the folder as a fresh clone has it: tracked files only.
mkdir -p "$work/clean"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard -- sdk/python |
	xargs -0 tar -cf - --no-recursion) | tar -C "$work/clean" -xf - --strip-components=1

# The wheel and the sdist; the wheel carries the type stubs and py.typed.
build_py=$(venv build "$python")
"$build_py" -m pip install "${pip_quiet[@]}" -r "$here/tests/requirements-build.txt"
"$build_py" -m build --no-isolation --outdir "$work/dist" "$work/clean/python" >/dev/null
wheel=$(ls "$work"/dist/kvgate_sdk-*.whl)
sdist=$(ls "$work"/dist/kvgate_sdk-*.tar.gz)
listing=$("$build_py" -m zipfile -l "$wheel")
for f in kvgate/v1/router_pb2.py kvgate/v1/router_pb2.pyi kvgate/v1/router_pb2_grpc.py kvgate/v1/admin_pb2.pyi kvgate/v1/py.typed; do
	grep -q "^$f " <<<"$listing" || { echo "install-test: $wheel lacks $f" >&2; exit 1; }
done

py=$(venv path "$python")
"$py" -m pip install "${pip_quiet[@]}" -r "$here/tests/requirements-latest.txt" "$here"
run_tests path "$py"

py=$(venv wheel "$python_floor")
"$py" -m pip install "${pip_quiet[@]}" -r "$here/tests/requirements-floor.txt" "$wheel"
run_tests wheel "$py"

py=$(venv sdist "$python")
"$py" -m pip install "${pip_quiet[@]}" -r "$here/tests/requirements-latest.txt" "$sdist"
run_tests sdist "$py"
