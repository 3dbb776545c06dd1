/**
 * `npm run demo`: three cronwarden replicas on this machine, with the example jobs in
 * examples/jobs.ts. It stops the leader gracefully, then kills the next one with SIGKILL, and
 * prints who took over, how fast, and what the ledger says: every scheduled second fired once,
 * every effect written once. Backend: postgres by default (nothing else to install);
 * `npm run demo -- redis` uses Redis. `npm run demo -- --keep` leaves the two survivors running
 * (status page and admin API stay up) until Ctrl-C.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrateDatabase } from '../src/db/migrate.js';
import { checkHistory, readHistory } from '../src/drill/checker.js';
import { CronSchedule } from '../src/scheduler/cron-schedule.js';

const backend = process.argv.includes('redis') ? 'redis' : 'postgres';
const keep = process.argv.includes('--keep');
const adminToken = process.env.CRONWARDEN_ADMIN_TOKEN ?? `demo-${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`;
// A fresh namespace per run: BullMQ job ids derive from ledger run ids, which restart with the
// recreated demo database, and an earlier run's finished jobs in the shared Redis would swallow them.
const namespace = `demo-${Date.now().toString(36)}`;
const adminPorts = new Map([['demo-1', 8081], ['demo-2', 8082], ['demo-3', 8083]]);
const adminUrlOf = (id: string) => `http://127.0.0.1:${adminPorts.get(id)}`;
const adminUrl = process.env.CRONWARDEN_DEMO_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const redisUrl = process.env.CRONWARDEN_REDIS_URL ?? 'redis://127.0.0.1:6379';
const dbName = 'cronwarden_demo';
const databaseUrl = adminUrl.replace(/\/[^/]*$/, `/${dbName}`);
const root = fileURLToPath(new URL('..', import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const say = (line: string) => console.log(`[demo] ${line}`);

interface Replica {
  id: string;
  child: ChildProcess;
  exited: Promise<number | null>;
}
const elections: { id: string; token: string; at: number }[] = [];

function startReplica(id: string): Replica {
  const child = spawn(
    process.execPath,
    ['bin/cronwarden.js', 'start', '--backend', backend, '--database-url', databaseUrl, '--redis-url', redisUrl, '--jobs', 'examples/jobs.ts',
      '--replica-id', id, '--namespace', namespace, '--lease-ttl-ms', '3000', '--shutdown-grace-ms', '2000', '--log-level', 'info',
      '--admin-port', String(adminPorts.get(id))],
    { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, CRONWARDEN_ADMIN_TOKEN: adminToken } },
  );
  createInterface({ input: child.stdout! }).on('line', (line) => {
    try {
      const log = JSON.parse(line) as { msg?: string; token?: string; replica?: string };
      if (log.msg === 'elected leader') elections.push({ id, token: log.token ?? '?', at: Date.now() });
    } catch {
      // not a log line
    }
  });
  return { id, child, exited: new Promise((r) => child.once('exit', (code) => r(code))) };
}

async function waitForLeader(after: number, timeoutMs: number): Promise<{ id: string; token: string; at: number }> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const e = elections.find((x) => x.at >= after);
    if (e) return e;
    await sleep(20);
  }
  throw new Error(`no leader elected within ${timeoutMs} ms`);
}

const admin = new pg.Client({ connectionString: adminUrl });
await admin.connect();
await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
await admin.query(`CREATE DATABASE ${dbName}`);
await admin.end();
await migrateDatabase(databaseUrl);
const pool = new pg.Pool({ connectionString: databaseUrl });
await pool.query('CREATE TABLE demo_effects (job text NOT NULL, scheduled_at timestamptz NOT NULL, token bigint NOT NULL)');
say(`ledger: ${databaseUrl} (migrated); lease backend: ${backend}; delivery: BullMQ on ${redisUrl}`);

const replicas = ['demo-1', 'demo-2', 'demo-3'].map(startReplica);
let ok = false;
try {
  const first = await waitForLeader(0, 30_000);
  say(`three replicas up; leader ${first.id} with fencing token ${first.token}`);
  for (const r of replicas) say(`  ${r.id}: admin API ${adminUrlOf(r.id)}/api/lease   status page ${adminUrlOf(r.id)}/   metrics ${adminUrlOf(r.id)}/metrics`);
  say(`  try: node bin/cronwarden.js status --url ${adminUrlOf('demo-1')}`);
  say(`       CRONWARDEN_ADMIN_TOKEN=${adminToken} node bin/cronwarden.js trigger report --url ${adminUrlOf('demo-2')}`);
  await sleep(8000);
  const from = new Date(Math.ceil(Date.now() / 1000) * 1000 - 6000);

  const stopAt = Date.now();
  say(`stopping the leader ${first.id} gracefully (SIGTERM)…`);
  replicas.find((r) => r.id === first.id)!.child.kill('SIGTERM');
  const second = await waitForLeader(stopAt, 15_000);
  say(`${second.id} took over in ${second.at - stopAt} ms (token ${second.token}): the old leader released its lease`);
  await sleep(8000);

  const killAt = Date.now();
  say(`killing the new leader ${second.id} with SIGKILL (no release; its lease must expire, TTL 3 s)…`);
  replicas.find((r) => r.id === second.id)!.child.kill('SIGKILL');
  const third = await waitForLeader(killAt, 20_000);
  say(`${third.id} took over in ${third.at - killAt} ms (token ${third.token}) and caught up the fires missed meanwhile`);
  await sleep(8000);

  const to = new Date(Math.floor(Date.now() / 1000) * 1000 - 2000);
  await sleep(4000); // let the last runs (and re-deliveries of the killed replica's runs) finish
  const expected = new Map([
    ['heartbeat', CronSchedule.parse('* * * * * *').between(from.getTime() - 1, to.getTime())],
    ['report', CronSchedule.parse('*/5 * * * * *', 'Europe/Berlin').between(from.getTime() - 1, to.getTime())],
  ]);
  const effects = await pool.query<{ job: string; scheduled_at: Date; n: number }>(
    'SELECT job, scheduled_at, count(*)::int AS n FROM demo_effects WHERE scheduled_at BETWEEN $1 AND $2 GROUP BY 1, 2',
    [from, to],
  );
  const report = checkHistory(await readHistory(pool, { from, to }), { expected, requireCompleted: true });
  const doubled = effects.rows.filter((r) => r.n > 1).length;
  say(`window ${from.toISOString()} .. ${to.toISOString()}: ${report.expected} scheduled fires expected`);
  say(`committed ${report.committed}, duplicated ${report.duplicated}, missed ${report.missed}, unfinished ${report.incomplete}`);
  say(`effects written: ${effects.rows.length} scheduled times, ${doubled} of them more than once`);
  ok = report.ok && doubled === 0 && effects.rows.length === report.expected;
  say(ok ? 'no run was duplicated or lost.' : `VIOLATIONS: ${JSON.stringify(report.violations.slice(0, 5))}`);
  if (keep) {
    const alive = replicas.filter((r) => r.child.exitCode === null && r.child.signalCode === null);
    say(`--keep: ${alive.map((r) => `${r.id} (${adminUrlOf(r.id)}/)`).join(', ')} keep running; Ctrl-C to stop them`);
    await new Promise<void>((resolve) => process.once('SIGINT', () => resolve()));
  }
} finally {
  for (const r of replicas) r.child.kill('SIGTERM');
  await Promise.all(replicas.map((r) => r.exited));
  await pool.end();
}
process.exit(ok ? 0 : 1);
