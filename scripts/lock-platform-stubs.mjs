// The npm registry this project is built against does not serve msgpackr-extract's prebuilt
// packages for other platforms (darwin, win32, linux-arm), so `npm install` here leaves them out of
// package-lock.json, and npm 11's `npm ci` then refuses the lock as out of sync. They are optional
// and never installed on linux-x64 CI, so listing them (no tarball, no integrity) with their
// os/cpu restores a lock that `npm ci` accepts everywhere. Run after regenerating the lock.
import { readFileSync, writeFileSync } from 'node:fs';

const path = new URL('../package-lock.json', import.meta.url);
const lock = JSON.parse(readFileSync(path, 'utf8'));
const parent = lock.packages['node_modules/msgpackr-extract'];
if (!parent) throw new Error('msgpackr-extract is not in the lock');
const platform = (name) => {
  const [, os, cpu] = name.match(/msgpackr-extract-(darwin|linux|win32)-(.+)$/) ?? [];
  return { os, cpu };
};
let added = 0;
for (const [name, version] of Object.entries(parent.optionalDependencies ?? {})) {
  const key = `node_modules/${name}`;
  if (lock.packages[key]) continue;
  const { os, cpu } = platform(name);
  lock.packages[key] = { version, cpu: [cpu], license: 'MIT', optional: true, os: [os] };
  added++;
}
if (added > 0) writeFileSync(path, JSON.stringify(lock, null, 2) + '\n');
console.log(`lock-platform-stubs: added ${added} optional platform entries`);
