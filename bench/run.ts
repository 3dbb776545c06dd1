/**
 * `npm run bench`: every benchmark, each reported as a ratio to a baseline measured in the same
 * run (these machines are noisy). Writes bench/results/<name>.json. Pass names to run a subset:
 * `npm run bench -- locks`; options after the names go to the benches that take them (kill-leader).
 */
import { mkdirSync, writeFileSync } from 'node:fs';

const all: Record<string, () => Promise<Record<string, unknown>>> = {
  locks: async () => (await import('./locks.js')).benchLocks(),
  scheduler: async () => (await import('./scheduler.js')).benchScheduler(),
  drill: async () => (await import('./drill.js')).benchDrill(),
  effects: async () => (await import('./effects.js')).benchEffects(),
  'cron-differential': async () => (await import('./cron-differential.js')).benchCronDifferential(),
  'admin-flood': async () => (await import('./admin-flood.js')).benchAdminFlood(),
  'runtime-schedules': async () => (await import('./runtime-schedules.js')).benchRuntimeSchedules(),
  // Takes options after its name: `npm run bench -- kill-leader --duration 120 --kill-every 20`.
  'kill-leader': async () => (await import('./kill-leader.js')).benchKillLeader(process.argv.slice(2)),
  speed: async () => (await import('./speed.js')).benchSpeed(),
  // `npm run bench -- run-path --runs 10000 --workloads write,pipelined,empty`
  'run-path': async () => (await import('./run-path.js')).benchRunPath(),
  // `npm run bench -- wal --runs 2000`: the run path's WAL by record and relation (pg_waldump)
  wal: async () => (await import('./wal.js')).benchWal(),
  schedules: async () => (await import('./schedules.js')).benchSchedules(),
  // `npm run bench -- shards --load 10000 --shards 3 --replicas 1,2,3`
  shards: async () => (await import('./shards.js')).benchShards(),
  // `npm run bench -- workflows --chains 200 --steps 5 --width 1000 --rounds 3`
  workflows: async () => (await import('./workflows.js')).benchWorkflows(process.argv.slice(2)),
  // `npm run bench -- ledger-check --runs 10000 --rounds 20`
  'ledger-check': async () => (await import('./ledger-check.js')).benchLedgerCheck(),
};
const wanted = process.argv.slice(2).filter((a) => a in all);
const names = wanted.length > 0 ? wanted : Object.keys(all);
mkdirSync(new URL('./results/', import.meta.url), { recursive: true });
for (const name of names) {
  const result = await all[name]!();
  const file = new URL(`./results/${name}.json`, import.meta.url);
  writeFileSync(
    file,
    JSON.stringify({ at: new Date().toISOString(), node: process.version, ...result }, bigintJson, 2),
  );
  // stderr, so a bench's --json output stays the only thing on stdout
  console.error(`\nwrote bench/results/${name}.json`);
}
process.exit(0);

function bigintJson(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? value.toString() : value;
}
