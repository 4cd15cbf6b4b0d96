/**
 * Builds the npm package into `dist/`: `mod.ts` and every file of `src/`
 * compiled to JavaScript ES modules with `.d.ts` declarations beside them,
 * relative `.ts` import specifiers rewritten to `.js`, and the CLI
 * (`dist/src/cli/main.js`) made an executable with a `#!/usr/bin/env node`
 * line. The result runs on plain Node 20 (no tsx), and on Bun and Deno when
 * installed from npm. `npm pack` runs it through the `prepack` script.
 *
 * Usage: `tsx scripts/build_npm.ts [--no-check]` (or `deno run -A …`,
 * `bun …`); `npm run build`. `--no-check` emits without type-checking
 * (`deno check` is the checker of record; this is for a tree that is
 * mid-change).
 *
 * How: the project's own TypeScript (`tsc`, the native TypeScript 7) with
 * `rewriteRelativeImportExtensions`, type-checking the sources as it goes,
 * with Node's types (`@types/node`) and Deno's (`deno types`, written to a
 * temporary file) so that `src/runtime/deno.ts` checks too. Three fixes
 * follow on the output:
 *
 * - tsc wraps a dynamic `import(specifier)` whose specifier is a variable in
 *   a `__rewriteRelativeImportExtension` helper defined at the top of the
 *   module. The `bun-ffi` worker body is serialised with
 *   `Function.prototype.toString` and run on its own, where that helper does
 *   not exist; and every such specifier in `src/` is a bare one
 *   (`bun:ffi`, `node:worker_threads`) that the helper leaves unchanged. So
 *   the helper is removed and its calls unwrapped.
 * - The relative `.ts` specifiers of the declarations, which tsc keeps,
 *   become `.js` (which every TypeScript resolution mode maps to the
 *   `.d.ts`).
 * - The shebang and the executable bit of the CLI.
 *
 * Then every emitted file is checked: no relative specifier ending in
 * `.ts`, no helper left.
 *
 * @module
 */

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import process from "node:process";

const ROOT = path.resolve(import.meta.dirname ?? ".", "..");
const BIN = path.join(ROOT, "node_modules", ".bin");
const OUT = path.join(ROOT, "dist");
const CLI = path.join(OUT, "src", "cli", "main.js");
const SHEBANG = "#!/usr/bin/env node\n";
/** rwxr-xr-x: what npm gives a `bin` file, set here too for `node dist/…` users. */
const EXECUTABLE_MODE = 0o755;

const HELPER = "__rewriteRelativeImportExtension";
/** tsc's helper definition: `var __rewrite… = (this && this.__rewrite…) || function (…) {…};`. */
const HELPER_DEFINITION =
  /^var __rewriteRelativeImportExtension = \(this && this\.__rewriteRelativeImportExtension\) \|\| function \([^)]*\) \{\n[\s\S]*?\n\};\n/m;
/** A call of the helper on a plain variable, the only form `src/` produces. */
const HELPER_CALL = /\b__rewriteRelativeImportExtension\(([A-Za-z_$][\w$]*)\)/g;
/** A relative specifier still naming a `.ts` file, in an import, export or `import()`. */
const TS_SPECIFIER = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)["'](\.{1,2}\/[^"']*\.ts)["']/g;

/** The options of the compilation: ES2022 output for Node 20, Deno and Bun. */
const TSC_FLAGS = [
  "--rootDir",
  ROOT,
  "--outDir",
  OUT,
  "--module",
  "nodenext",
  "--moduleResolution",
  "nodenext",
  "--target",
  "es2022",
  "--lib",
  "esnext",
  "--types",
  "node",
  "--declaration",
  "--rewriteRelativeImportExtensions",
  "--strict",
  "--noUncheckedIndexedAccess",
  "--noImplicitOverride",
  "--noImplicitReturns",
  "--noFallthroughCasesInSwitch",
  // Checks our files, not the ambient types of Deno and Node against each other.
  "--skipLibCheck",
  "--pretty",
  "false",
];

/** Every `.ts` file under `directory`, sorted. */
function typeScriptFiles(directory: string): string[] {
  const files: string[] = [];
  for (const entry of fs.readdirSync(directory, { withFileTypes: true })) {
    const full = path.join(directory, entry.name);
    if (entry.isDirectory()) files.push(...typeScriptFiles(full));
    else if (entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts")) files.push(full);
  }
  return files.sort();
}

/** Every file under `directory`. */
function allFiles(directory: string): string[] {
  const files: string[] = [];
  for (const entry of fs.readdirSync(directory, { withFileTypes: true })) {
    const full = path.join(directory, entry.name);
    if (entry.isDirectory()) files.push(...allFiles(full));
    else files.push(full);
  }
  return files;
}

/** Runs a tool; throws with its name and status when it fails. */
function run(command: string, args: string[], stdout: "inherit" | number = "inherit"): void {
  const result = spawnSync(command, args, { cwd: ROOT, stdio: ["ignore", stdout, "inherit"] });
  if (result.error !== undefined) {
    throw new Error(`Cannot run ${command}: ${result.error.message}`);
  }
  if (result.status !== 0) {
    throw new Error(
      `${path.basename(command)} ${args[0]} failed with ${result.status ?? result.signal}`,
    );
  }
}

/** Writes Deno's type declarations (`deno types`) to a file in `directory`. */
function writeDenoTypes(directory: string): string {
  const file = path.join(directory, "lib.deno.d.ts");
  const fd = fs.openSync(file, "w");
  try {
    run(path.join(BIN, "deno"), ["types"], fd);
  } finally {
    fs.closeSync(fd);
  }
  return file;
}

/** Unwraps tsc's import-rewriting helper (see the module comment); returns the new text. */
function removeImportHelper(file: string, text: string): string {
  if (!text.includes(HELPER)) return text;
  const withoutDefinition = text.replace(HELPER_DEFINITION, "");
  if (withoutDefinition === text) {
    throw new Error(`${file}: ${HELPER} is used but its definition has an unknown form`);
  }
  const unwrapped = withoutDefinition.replace(HELPER_CALL, "$1");
  if (unwrapped.includes(HELPER)) {
    throw new Error(`${file}: ${HELPER} is called on something other than a variable`);
  }
  return unwrapped;
}

/** The lines of `text` that are not comments (JSDoc examples import `./mod.ts`). */
function code(text: string): string {
  return text.split("\n").filter((line) => !isComment(line)).join("\n");
}

/** Whether a line of emitted code is part of a comment. */
function isComment(line: string): boolean {
  return /^\s*(\*|\/\*|\/\/)/.test(line);
}

/**
 * Rewrites the relative `.ts` specifiers of a declaration file to `.js`:
 * tsc rewrites them in JavaScript only, and a `.js` specifier is the one
 * every TypeScript resolution mode maps to the `.d.ts` beside it.
 */
function rewriteDeclarationSpecifiers(text: string): string {
  return text.split("\n").map((line) =>
    isComment(line) ? line : line.replace(
      TS_SPECIFIER,
      (statement, specifier: string) =>
        statement.replace(specifier, `${specifier.slice(0, -".ts".length)}.js`),
    )
  ).join("\n");
}

/** Fixes and checks every emitted file; returns how many there are. */
function finish(): number {
  const files = allFiles(OUT);
  for (const file of files) {
    const relative = path.relative(ROOT, file);
    let text = fs.readFileSync(file, "utf8");
    if (file.endsWith(".js")) text = removeImportHelper(relative, text);
    if (file.endsWith(".d.ts")) text = rewriteDeclarationSpecifiers(text);
    if (file === CLI) text = SHEBANG + text;
    for (const match of code(text).matchAll(TS_SPECIFIER)) {
      throw new Error(`${relative}: the specifier ${match[1]} was not rewritten to .js`);
    }
    fs.writeFileSync(file, text);
  }
  if (!fs.existsSync(CLI)) throw new Error(`${path.relative(ROOT, CLI)} was not emitted`);
  fs.chmodSync(CLI, EXECUTABLE_MODE);
  return files.length;
}

function main(argv: readonly string[]): void {
  for (const argument of argv) {
    if (argument !== "--no-check") throw new Error(`Unknown argument ${argument}`);
  }
  const check = !argv.includes("--no-check");
  const started = Date.now();
  fs.rmSync(OUT, { recursive: true, force: true });
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "mqstore-build-"));
  let count: number;
  try {
    const denoTypes = writeDenoTypes(scratch);
    const sources = [path.join(ROOT, "mod.ts"), ...typeScriptFiles(path.join(ROOT, "src"))];
    const flags = check ? TSC_FLAGS : [...TSC_FLAGS, "--noCheck"];
    run(path.join(BIN, "tsc"), [...flags, ...sources, denoTypes]);
    count = finish();
  } catch (error) {
    // tsc emits even when a check fails: a dist/ of a failed build must not be packed.
    fs.rmSync(OUT, { recursive: true, force: true });
    throw error;
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  console.log(`dist/: ${count} files in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

try {
  main(process.argv.slice(2));
} catch (error) {
  console.error(`build_npm: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
}
