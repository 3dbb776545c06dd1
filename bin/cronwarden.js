#!/usr/bin/env node
// Runs the compiled CLI (dist/). The package ships dist/ and no src/, so an installed cronwarden
// needs no TypeScript tooling at run time. Only in a source checkout of this repository, where
// src/ exists and tsx is a devDependency, a missing dist/ falls back to the TypeScript source.
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { dirname, join } from 'node:path';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const built = join(root, 'dist', 'cli', 'main.js');
const source = join(root, 'src', 'cli', 'main.ts');

const missing = () => {
  process.stderr.write(`cronwarden: ${built} is missing: run \`npm run build\` in ${root}\n`);
  process.exit(2);
};

if (existsSync(built)) {
  await import(pathToFileURL(built).href);
} else if (existsSync(source)) {
  let register;
  try {
    ({ register } = await import('tsx/esm/api'));
  } catch {
    missing();
  }
  register();
  await import(pathToFileURL(source).href);
} else {
  missing();
}
