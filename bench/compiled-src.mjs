/**
 * The benchmarks measure cronwarden as its users run it, compiled as the package ships it, beside
 * baselines that run as plain JavaScript too: not the TypeScript sources through tsx, whose
 * transform names each function it creates at run time (esbuild's keepNames; measured on the empty
 * run path, five pairs in turn: Node's CPU a run 0.69-1.05x compiled, median 0.78). `npm run bench`
 * compiles src/ into .bench-dist/ (not dist/: bin/cronwarden.js, which the tests start, runs dist/
 * whenever it exists), and every import of src/ by a benchmark resolves to its compiled file there
 * (hooks in compiled-src-hooks.mjs).
 */
import { register } from 'node:module';

register('./compiled-src-hooks.mjs', import.meta.url);
