// Copy the files tsc does not emit next to the compiled code: the Redis Lua scripts (read from
// ./lua relative to src/locks/redis.ts, in src as in dist), the admin console page, its own scripts and style,
// and its vendored assets.
// Paths resolve from this file, so the copy works whatever the working directory. The compiled
// code's directory is dist/ unless named (`node scripts/copy-assets.mjs .bench-dist`: npm run bench).
import { cpSync, mkdirSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const at = (p) => fileURLToPath(new URL(`../${p}`, import.meta.url));
const out = process.argv[2] ?? 'dist';

const luaFrom = at('src/locks/lua/');
const luaTo = at(`${out}/locks/lua/`);
mkdirSync(luaTo, { recursive: true });
const scripts = readdirSync(luaFrom).filter((f) => f.endsWith('.lua'));
if (scripts.length === 0) throw new Error(`copy-assets: no .lua files in ${luaFrom}`);
for (const f of scripts) cpSync(luaFrom + f, luaTo + f);

mkdirSync(at(`${out}/admin/`), { recursive: true });
// The console page and its own scripts and style (the history view, the workflow run page, the job page), served as / and /assets/*.
const pages = [
  'console.html',
  'console-history.js',
  'console-workflow-model.js',
  'console-workflow.js',
  'console-workflow.css',
  'console-occurrences.js',
  'console-occurrences.css',
];
for (const f of pages) cpSync(at(`src/admin/${f}`), at(`${out}/admin/${f}`));
// The console's vendored chart and graph layout libraries (src/admin/vendor/*/README.md), served as /assets/*.
cpSync(at('src/admin/vendor/'), at(`${out}/admin/vendor/`), { recursive: true });
console.log(
  `copy-assets: ${scripts.length} Lua scripts, the console page, its scripts, style and vendored assets into ${out}/`,
);
