/**
 * The benchmarks measure cronwarden as its users run it, the built package (dist/, `npm run build`),
 * beside baselines that run as plain JavaScript too: not the TypeScript sources through tsx, whose
 * transform names each function it creates at run time (esbuild's keepNames; measured on the empty
 * run path, five pairs in turn: Node's CPU a run 0.69-1.05x compiled, median 0.78). Every import of
 * src/ by a benchmark resolves to its compiled file in dist/ (hooks in compiled-src-hooks.mjs).
 */
import { register } from 'node:module';

register('./compiled-src-hooks.mjs', import.meta.url);
