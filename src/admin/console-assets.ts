/**
 * The files the console page loads besides itself: the vendored uPlot (vendor/uplot/README.md) for
 * the history charts, the vendored dagre (vendor/dagre/README.md) that lays out a workflow run's
 * graph, and the console's own scripts (the history view, the workflow run page, the job page) and styles. Read from next to the compiled code
 * (dist/admin, where scripts/copy-assets.mjs puts them) or from the source checkout, once, and kept.
 */
import { readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** A vendored library is one exact version: cached. The console's own files change with the replica: revalidated. */
const VENDORED = 'public, max-age=3600';
const OWN = 'no-cache';

export const consoleAssets = {
  'uplot.js': { file: 'vendor/uplot/uPlot.iife.min.js', type: 'text/javascript; charset=utf-8', cache: VENDORED },
  'uplot.css': { file: 'vendor/uplot/uPlot.min.css', type: 'text/css; charset=utf-8', cache: VENDORED },
  'dagre.js': { file: 'vendor/dagre/dagre.min.js', type: 'text/javascript; charset=utf-8', cache: VENDORED },
  'history.js': { file: 'console-history.js', type: 'text/javascript; charset=utf-8', cache: OWN },
  'workflow-model.js': { file: 'console-workflow-model.js', type: 'text/javascript; charset=utf-8', cache: OWN },
  'workflow.js': { file: 'console-workflow.js', type: 'text/javascript; charset=utf-8', cache: OWN },
  'workflow.css': { file: 'console-workflow.css', type: 'text/css; charset=utf-8', cache: OWN },
  'occurrences.js': { file: 'console-occurrences.js', type: 'text/javascript; charset=utf-8', cache: OWN },
  'occurrences.css': { file: 'console-occurrences.css', type: 'text/css; charset=utf-8', cache: OWN },
} as const;

export type ConsoleAssetName = keyof typeof consoleAssets;

const read = new Map<ConsoleAssetName, Promise<string>>();

/** The asset's text, content type and cache policy; rejects when the file is in neither place. */
export async function consoleAsset(name: ConsoleAssetName): Promise<{ body: string; type: string; cache: string }> {
  const { file, type, cache } = consoleAssets[name];
  let body = read.get(name);
  if (!body) {
    const path = [new URL(`./${file}`, import.meta.url), new URL(`../../src/admin/${file}`, import.meta.url)]
      .map((u) => fileURLToPath(u))
      .find((p) => existsSync(p));
    body = path ? readFile(path, 'utf8') : Promise.reject(new Error(`console asset ${file} not found`));
    body.catch(() => read.delete(name));
    read.set(name, body);
  }
  return { body: await body, type, cache };
}
