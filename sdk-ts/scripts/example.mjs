#!/usr/bin/env node
// Compiles a TypeScript agent with tsc and runs it: `node sdk-ts/scripts/example.mjs examples/ts/pay_invoices.ts`.
// The file is compiled inside sdk-ts/.examples/ so that `@agentos/sdk` (the package naming itself),
// `ai` and `@mastra/core` resolve from sdk-ts, without a second install beside the examples.
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const SDK = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const TSC = join(SDK, "node_modules", "typescript", "bin", "tsc");

/** Type-checks and compiles one .ts file; returns the path of the .js to run. Throws with tsc's output. */
export function compile(source, tag = basename(source, ".ts")) {
  const dir = join(SDK, ".examples", tag);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const copy = join(dir, basename(source));
  copyFileSync(source, copy);
  const args = [TSC, "--strict", "--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext",
    "--types", "node", "--skipLibCheck", "--rootDir", dir, "--outDir", dir, copy];
  // From sdk-ts, so that tsc finds @types/node whatever the caller's directory.
  const out = spawnSync(process.execPath, args, { encoding: "utf8", cwd: SDK });
  if (out.status !== 0) throw new Error(`tsc failed on ${source}:\n${out.stdout}${out.stderr}`);
  return copy.replace(/\.ts$/, ".js");
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [source, ...rest] = process.argv.slice(2);
  if (!source) {
    console.error("usage: node sdk-ts/scripts/example.mjs <agent.ts> [args…]");
    process.exit(2);
  }
  const js = compile(resolve(source));
  const child = spawn(process.execPath, [js, ...rest], { stdio: "inherit" });
  for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => child.kill(sig));
  child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
}
