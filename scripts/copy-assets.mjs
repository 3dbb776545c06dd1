// Copy the files tsc does not emit next to the compiled code: the Redis Lua scripts (read from
// ./lua relative to src/locks/redis.ts, in src as in dist), the admin console page and its vendored assets.
// Paths resolve from this file, so the copy works whatever the working directory.
import { cpSync, mkdirSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const at = (p) => fileURLToPath(new URL(`../${p}`, import.meta.url));

const luaFrom = at('src/locks/lua/');
const luaTo = at('dist/locks/lua/');
mkdirSync(luaTo, { recursive: true });
const scripts = readdirSync(luaFrom).filter((f) => f.endsWith('.lua'));
if (scripts.length === 0) throw new Error(`copy-assets: no .lua files in ${luaFrom}`);
for (const f of scripts) cpSync(luaFrom + f, luaTo + f);

mkdirSync(at('dist/admin/'), { recursive: true });
cpSync(at('src/admin/console.html'), at('dist/admin/console.html'));
// The console's vendored chart library (src/admin/vendor/uplot/README.md), served as /assets/*.
cpSync(at('src/admin/vendor/'), at('dist/admin/vendor/'), { recursive: true });
console.log(`copy-assets: ${scripts.length} Lua scripts, the console page and its vendored assets into dist/`);
