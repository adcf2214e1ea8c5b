#!/usr/bin/env bash
# sdk/typescript/scripts/install-test.sh (make sdk-install-test): installs
# @kvgate/sdk into fresh projects the ways a user would, and proves each
# install works: a strict `tsc` compile of the README's streaming example
# against the installed package's types, then that example run against a live
# kvgate (bin/kvgate serve on its embedded default).
#
#   tarball  npm pack of this folder with dist/ removed (prepare builds it)
#   path     npm install --install-links <a clean copy of this folder>: no
#            node_modules, no dist/, as in a fresh clone
#   git      npm install git+file://<a repository whose root is this folder>
#            (npm cannot install a subdirectory of a git repository; a
#            `git subtree split --prefix sdk/typescript` branch is that root)
#
# Each project pins typescript, @types/node and Connect at the versions of
# this package's lockfile. Work happens in a temporary directory, removed at
# the end; npm's cache (~/.npm) makes warm runs fast. KVGATE_BIN is the binary.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$here/../.." && pwd)
kvgate_bin=${KVGATE_BIN:-$repo/bin/kvgate}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvgate-sdk-ts.XXXXXX")
kvgate_pid=
cleanup() {
	if [ -n "$kvgate_pid" ]; then kill "$kvgate_pid" 2>/dev/null || true; wait "$kvgate_pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

# The version of a package in this folder's lockfile.
locked() {
	node -e 'const l = require(process.argv[1]); console.log(l.packages["node_modules/" + process.argv[2]].version)' \
		"$here/package-lock.json" "$1"
}
pins=("typescript@$(locked typescript)" "@types/node@$(locked @types/node)"
	"@connectrpc/connect@$(locked @connectrpc/connect)" "@connectrpc/connect-node@$(locked @connectrpc/connect-node)")

# The README's first ```ts block: the example a user copies.
example=$(awk '/^```ts$/ {on = 1; next} on && /^```$/ {exit} on {print}' "$here/README.md")
if [ -z "$example" ]; then echo "install-test: no \`\`\`ts block in $here/README.md" >&2; exit 1; fi
grep -q 'http://127.0.0.1:30000' <<<"$example" || { echo "install-test: the README example does not dial http://127.0.0.1:30000" >&2; exit 1; }

# kvgate on a free port; the address comes from its "kvgate serving" line.
exec 3< <(exec "$kvgate_bin" serve --port 0 --prometheus-port -1 --embedded-time-scale 0 2>&1 >/dev/null)
kvgate_pid=$!
addr=
while IFS= read -r line <&3; do
	if [[ $line =~ msg=\"kvgate\ serving\"\ grpc=([^ ]+) ]]; then addr=${BASH_REMATCH[1]}; break; fi
done
[ -n "$addr" ] || { echo "install-test: kvgate exited before serving" >&2; exit 1; }
cat <&3 >/dev/null &

# new_project DIR: an empty ESM project with a strict tsconfig.
new_project() {
	mkdir -p "$1"
	cat >"$1/package.json" <<-'EOF'
	{ "name": "kvgate-sdk-install-test", "private": true, "type": "module" }
	EOF
	cat >"$1/tsconfig.json" <<-'EOF'
	{ "compilerOptions": { "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
	  "strict": true, "skipLibCheck": false, "outDir": "out" }, "include": ["example.ts"] }
	EOF
	sed "s#http://127.0.0.1:30000#http://$addr#" <<<"$example" >"$1/example.ts"
}

# check DIR HOW: compile the example strictly and run it against kvgate.
check() {
	(cd "$1" && npx --no-install tsc -p tsconfig.json)
	local out
	out=$(cd "$1" && node out/example.js)
	printf '%s\n' "$out" | sed "s/^/  [$2] /"
	if ! grep -Eq '^[0-9]+ prompt tokens, [0-9]+ cached, on grpc://' <<<"$(tail -n 1 <<<"$out")"; then
		echo "install-test: $2: the example's last line is not its usage line" >&2
		exit 1
	fi
	echo "install-test: $2: ok"
}

npm_install() { (cd "$1" && shift && npm install --no-audit --no-fund --loglevel=error "$@"); }

# A copy of the folder as a fresh clone has it: tracked files only.
clean=$tmp/clean/typescript
mkdir -p "$clean"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard -- sdk/typescript |
	xargs -0 tar -cf - --no-recursion) | tar -C "$tmp/clean" -xf - --strip-components=1

# tarball: npm pack runs prepare, which builds dist/.
mkdir -p "$tmp/pack"
(cd "$clean" && npm pack --silent --pack-destination "$tmp/pack" >/dev/null)
tarball=$(ls "$tmp"/pack/*.tgz)
listing=$(tar -tzf "$tarball")
grep -qx 'package/dist/src/index.d.ts' <<<"$listing" || { echo "install-test: $tarball has no dist/src/index.d.ts" >&2; exit 1; }
new_project "$tmp/tarball"
npm_install "$tmp/tarball" "$tarball" "${pins[@]}"
check "$tmp/tarball" tarball

# path: a folder that was never built (prepare installs its devDependencies).
rm -rf "$clean/node_modules" "$clean/dist"
new_project "$tmp/path"
npm_install "$tmp/path" --install-links "$clean" "${pins[@]}"
check "$tmp/path" path

# git: the folder as the root of a repository.
rm -rf "$clean/node_modules" "$clean/dist"
git -C "$clean" init -q -b main
git -C "$clean" add -A
git -C "$clean" -c user.name=install-test -c user.email=install-test@localhost commit -q -m sdk
new_project "$tmp/git"
npm_install "$tmp/git" "git+file://$clean#main" "${pins[@]}"
check "$tmp/git" git
