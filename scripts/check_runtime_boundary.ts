/**
 * Checks the runtime boundary: outside `src/runtime/` (and the `src/cli/`
 * entry point) no file in `src/` may use the globals `Deno`, `Bun` or
 * `process`, or import `bun:*`, `koffi` or `node:process`. The core gets a
 * {@link RuntimePort} instead. CI runs this; it exits 1 naming each breach.
 *
 * Usage: `tsx scripts/check_runtime_boundary.ts` (or `deno run -A …`).
 *
 * @module
 */

import fs from "node:fs";
import path from "node:path";
import process from "node:process";

const ROOT = path.resolve(import.meta.dirname ?? ".", "..");
const ALLOWED = [path.join("src", "runtime") + path.sep, path.join("src", "cli") + path.sep];
const FORBIDDEN_IMPORTS =
  /\bfrom\s+["'](bun:[^"']*|koffi|node:process)["']|\bimport\(\s*["'](bun:[^"']*|koffi|node:process)["']/g;
const FORBIDDEN_GLOBALS = /\b(Deno|Bun|process)\b/g;

function sourceFiles(directory: string): string[] {
  const files: string[] = [];
  for (const entry of fs.readdirSync(directory, { withFileTypes: true })) {
    const full = path.join(directory, entry.name);
    if (entry.isDirectory()) files.push(...sourceFiles(full));
    else if (/\.(ts|tsx|js|mjs)$/.test(entry.name)) files.push(full);
  }
  return files;
}

/** Blanks out comments, then string and template literals, keeping line numbers. */
function stripped(text: string): { code: string; withStrings: string } {
  const blank = (match: string) => match.replace(/[^\n]/g, " ");
  const withStrings = text.replace(/\/\*[\s\S]*?\*\//g, blank).replace(/\/\/[^\n]*/g, blank);
  const code = withStrings.replace(
    /"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`(?:[^`\\]|\\.)*`/g,
    blank,
  );
  return { code, withStrings };
}

function lineOf(text: string, index: number): number {
  return text.slice(0, index).split("\n").length;
}

const breaches: string[] = [];
for (const file of sourceFiles(path.join(ROOT, "src"))) {
  const relative = path.relative(ROOT, file);
  if (ALLOWED.some((prefix) => relative.startsWith(prefix))) continue;
  const { code, withStrings } = stripped(fs.readFileSync(file, "utf8"));
  for (const match of withStrings.matchAll(FORBIDDEN_IMPORTS)) {
    breaches.push(
      `${relative}:${lineOf(withStrings, match.index)}: imports ${match[1] ?? match[2]}`,
    );
  }
  for (const match of code.matchAll(FORBIDDEN_GLOBALS)) {
    breaches.push(`${relative}:${lineOf(code, match.index)}: uses ${match[1]}`);
  }
}

if (breaches.length > 0) {
  console.error("Runtime boundary breached (only src/runtime/ may touch the host):");
  for (const breach of breaches) console.error(`  ${breach}`);
  process.exit(1);
}
console.log("runtime boundary: ok (no host globals outside src/runtime/ and src/cli/)");
