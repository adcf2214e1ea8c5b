// npm's prepare step: builds dist/ (the package's JavaScript and type
// declarations) whenever npm packs this folder or installs it from a path or a
// git URL, so none of those needs a build by hand first.
//
// npm installs a git dependency's devDependencies before prepare, but not a
// folder's (`npm install /path/to/sdk/typescript`): then the locked ones
// (package-lock.json) are installed here first, with scripts off since this
// one is already running. Output goes to stderr so that `npm pack` still
// prints only the tarball's name on stdout.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
const stdio = ["ignore", process.stderr, process.stderr];

if (!existsSync(tsc)) {
  // npm_execpath is the npm that runs this script; plain "npm" otherwise.
  const npm = process.env.npm_execpath ? [process.execPath, process.env.npm_execpath] : ["npm"];
  execFileSync(npm[0], [...npm.slice(1), "ci", "--include=dev", "--ignore-scripts", "--no-audit", "--no-fund"], {
    cwd: root,
    stdio,
    shell: npm.length === 1 && process.platform === "win32",
  });
}
execFileSync(process.execPath, [tsc, "-p", "tsconfig.build.json"], { cwd: root, stdio });
