/**
 * The files the console page loads besides itself: the vendored uPlot (vendor/uplot/README.md)
 * for the history charts. Read from next to the compiled code (dist/admin, where
 * scripts/copy-assets.mjs puts them) or from the source checkout, once, and kept.
 */
import { readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const consoleAssets = {
  'uplot.js': { file: 'vendor/uplot/uPlot.iife.min.js', type: 'text/javascript; charset=utf-8' },
  'uplot.css': { file: 'vendor/uplot/uPlot.min.css', type: 'text/css; charset=utf-8' },
} as const;

export type ConsoleAssetName = keyof typeof consoleAssets;

const read = new Map<ConsoleAssetName, Promise<string>>();

/** The asset's text and content type; rejects when the file is in neither place. */
export async function consoleAsset(name: ConsoleAssetName): Promise<{ body: string; type: string }> {
  const { file, type } = consoleAssets[name];
  let body = read.get(name);
  if (!body) {
    const path = [new URL(`./${file}`, import.meta.url), new URL(`../../src/admin/${file}`, import.meta.url)]
      .map((u) => fileURLToPath(u))
      .find((p) => existsSync(p));
    body = path ? readFile(path, 'utf8') : Promise.reject(new Error(`console asset ${file} not found`));
    body.catch(() => read.delete(name));
    read.set(name, body);
  }
  return { body: await body, type };
}
