/** Module resolution hooks (see compiled-src.mjs): src/<path>.ts resolves to .bench-dist/<path>.js. */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const src = new URL('../src/', import.meta.url).href;
const dist = new URL('../.bench-dist/', import.meta.url).href;

export async function resolve(specifier, context, nextResolve) {
  const resolved = await nextResolve(specifier, context);
  if (!resolved.url.startsWith(src)) return resolved;
  const url = dist + new URL(resolved.url).pathname.slice(new URL(src).pathname.length).replace(/\.ts$/, '.js');
  if (!existsSync(fileURLToPath(url)))
    throw new Error(`${url} is not built: run the benchmarks with \`npm run bench\``);
  return { url, format: 'module', shortCircuit: true };
}
