/**
 * `npm run demo`: three cronwarden replicas on this machine, with the example jobs in
 * examples/jobs.ts. It stops the leader gracefully, then kills the next one with SIGKILL, and
 * prints who took over, how fast, and what the ledger says: every scheduled time fired once,
 * every effect written once. Backend: postgres by default; `npm run demo -- redis` uses Redis.
 *
 * On this machine: if PostgreSQL (127.0.0.1:5432, user postgres, no password) and Redis
 * (127.0.0.1:6379) answer, it touches nothing but its own database `cronwarden_demo` and its
 * namespace's Redis keys, and removes both at the end. If they do not, it lists what it would
 * install and change (scripts/demo-machine.ts), asks, and sets them up; `--yes` (or
 * CRONWARDEN_DEMO_YES=1) skips the question, which is required without a terminal.
 *
 * `--keep`: the one surviving replica (the last leader; the demo stopped the other two) keeps
 * running with its console and admin API until Ctrl-C, and the database and Redis keys are
 * left in place; the demo prints what it left and the commands that remove it.
 *
 * Exit code 0 when the ledger checks out; 1 (with what failed on stderr) otherwise; 130 on Ctrl-C.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrateDatabase } from '../src/db/migrate.js';
import { DEFAULT_SCHEMA } from '../src/db/tables.js';
import { checkHistory, readHistory, type Violation } from '../src/drill/checker.js';
import { AbortedError, InvalidArgumentError } from '../src/errors.js';
import type { JobDefinition } from '../src/jobs/define-job.js';
import * as exampleJobs from '../examples/jobs.js';
import {
  cleanUp,
  countNamespaceKeys,
  DEFAULT_ADMIN_URL,
  DEFAULT_REDIS_URL,
  prepareMachine,
  removalCommands,
  type DemoTargets,
} from './demo-machine.js';

const args = process.argv.slice(2);
const unknown = args.filter((a) => !['redis', 'postgres', '--keep', '--yes'].includes(a));
const backend = args.includes('redis') ? 'redis' : 'postgres';
const keep = args.includes('--keep');
const assumeYes = args.includes('--yes') || process.env.CRONWARDEN_DEMO_YES === '1';
const adminToken =
  process.env.CRONWARDEN_ADMIN_TOKEN ??
  `demo-${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`;
// A fresh namespace per run: BullMQ job ids derive from ledger run ids, which restart with the
// recreated demo database, and an earlier run's finished jobs in the shared Redis would swallow them.
const namespace = `demo-${Date.now().toString(36)}`;
const adminPorts = new Map([
  ['demo-1', 8081],
  ['demo-2', 8082],
  ['demo-3', 8083],
]);
const adminUrlOf = (id: string) => `http://127.0.0.1:${adminPorts.get(id)}`;
const adminUrl = process.env.CRONWARDEN_DEMO_ADMIN_URL ?? DEFAULT_ADMIN_URL;
const redisUrl = process.env.CRONWARDEN_REDIS_URL ?? DEFAULT_REDIS_URL;
const dbName = 'cronwarden_demo';
const databaseUrl = adminUrl.replace(/\/[^/]*$/, `/${dbName}`);
const root = fileURLToPath(new URL('..', import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const say = (line: string) => console.log(`[demo] ${line}`);
const targets: DemoTargets = { adminUrl, redisUrl, dbName, root, say };

/** Ctrl-C (or SIGTERM): stop the replicas, clean up as usual, exit 130. With --keep, the way to end. */
const interrupt = new AbortController();
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => interrupt.abort());

const LEASE_TTL_MS = 3000;
/**
 * BullMQ's lock on a run a worker holds. A run the SIGKILLed replica had in hand is re-delivered
 * only once this lock expires (and a surviving worker's stalled-job check, every lock/2, notices).
 * The default, 30 s, is right for production handlers that may run long, but the demo checks the
 * ledger seconds after the kill, so such a run would still be "running" then, and an overlap:'skip'
 * job would record skipped fires behind it. The example handlers take milliseconds, so 2 s is
 * plenty here and re-delivery happens within about 3 s of the kill.
 */
const WORKER_LOCK_MS = 2000;
/** How long the final check waits for the runs in its window to finish (re-deliveries included). */
const DRAIN_TIMEOUT_MS = 30_000;
const FINISHED_STATES = ['completed', 'failed', 'skipped', 'cancelled'];

/** The example jobs, as the replicas load them: their schedules and policies set the expectation. */
const jobs = Object.values(exampleJobs as Record<string, unknown>).filter(
  (v): v is JobDefinition => typeof v === 'object' && v !== null && 'schedule' in v && 'handler' in v && 'name' in v,
);

interface Replica {
  id: string;
  child: ChildProcess;
  exited: Promise<number | null>;
}
const elections: { id: string; token: string; at: number }[] = [];
/** Replicas that exited without the demo stopping them (a port in use, a crash): fail early and say so. */
const crashed: string[] = [];
const stopping = new Set<string>();

function startReplica(id: string): Replica {
  const child = spawn(
    process.execPath,
    // tsx for examples/jobs.ts, also when a built dist/ is there (bin/cronwarden.js then runs dist/).
    [
      '--import',
      'tsx',
      'bin/cronwarden.js',
      'start',
      '--backend',
      backend,
      '--database-url',
      databaseUrl,
      '--redis-url',
      redisUrl,
      '--jobs',
      'examples/jobs.ts',
      '--replica-id',
      id,
      '--namespace',
      namespace,
      '--schema',
      DEFAULT_SCHEMA,
      '--lease-ttl-ms',
      String(LEASE_TTL_MS),
      '--worker-lock-ms',
      String(WORKER_LOCK_MS),
      '--shutdown-grace-ms',
      '2000',
      '--log-level',
      'info',
      '--admin-port',
      String(adminPorts.get(id)),
    ],
    { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, CRONWARDEN_ADMIN_TOKEN: adminToken } },
  );
  createInterface({ input: child.stdout }).on('line', (line) => {
    try {
      const log = JSON.parse(line) as { msg?: string; token?: string; replica?: string };
      if (log.msg === 'elected leader') elections.push({ id, token: log.token ?? '?', at: Date.now() });
    } catch {
      // not a log line
    }
  });
  const exited = new Promise<number | null>((r) =>
    child.once('exit', (code, signal) => {
      if (!stopping.has(id) && !interrupt.signal.aborted)
        crashed.push(`${id} exited on its own (${signal ?? `code ${code}`})`);
      r(code);
    }),
  );
  return { id, child, exited };
}

function stop(r: Replica, signal: NodeJS.Signals): void {
  stopping.add(r.id);
  r.child.kill(signal);
}

function assertNoCrash(): void {
  if (interrupt.signal.aborted) throw new AbortedError('the demo (Ctrl-C)');
  if (crashed.length > 0) throw new Error(`${crashed.join('; ')} (see its output above)`);
}

async function waitForLeader(after: number, timeoutMs: number): Promise<{ id: string; token: string; at: number }> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    assertNoCrash();
    const e = elections.find((x) => x.at >= after);
    if (e) return e;
    await sleep(20);
  }
  throw new Error(`no leader elected within ${timeoutMs} ms`);
}

/** Sleep, but fail at once if a replica dies meanwhile. */
async function watch(ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    assertNoCrash();
    await sleep(Math.min(100, deadline - Date.now()));
  }
  assertNoCrash();
}

/** Wait until every run scheduled in [from, to] has finished; returns how many are still open. */
async function drain(pool: pg.Pool, from: Date, to: Date): Promise<number> {
  const deadline = Date.now() + DRAIN_TIMEOUT_MS;
  let announced = false;
  for (;;) {
    const res = await pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM cw_runs WHERE scheduled_at BETWEEN $1 AND $2 AND NOT (state = ANY($3::text[]))',
      [from, to, FINISHED_STATES],
    );
    const open = res.rows[0]!.n;
    if (open === 0 || Date.now() > deadline) return open;
    if (!announced)
      say(
        `waiting for ${open} run(s) still in progress (a killed worker's run is re-delivered once its ${WORKER_LOCK_MS} ms lock expires)…`,
      );
    announced = true;
    await sleep(250);
    assertNoCrash();
  }
}

async function connectAdmin(): Promise<pg.Client> {
  const admin = new pg.Client({ connectionString: adminUrl });
  try {
    await admin.connect();
  } catch (err) {
    const e = err as Error & { code?: string; errors?: Error[] };
    const why = e.message || e.errors?.[0]?.message || e.code || String(err);
    throw new Error(
      `cannot connect to PostgreSQL at ${adminUrl.replace(/:[^:@/]*@/, ':*****@')}: ${why} (run scripts/start-local-services.sh, or set CRONWARDEN_DEMO_ADMIN_URL)`,
    );
  }
  return admin;
}

/** How long the demo watches the replicas after each step; the ledger check covers all three spans. */
const WATCH_MS = 6000;

async function main(): Promise<boolean> {
  say(
    `three replicas (lease backend: ${backend}), the leader stopped with SIGTERM, the next killed with SIGKILL, then a ledger check`,
  );
  await prepareMachine(targets, assumeYes);
  say(`it creates database ${dbName} and Redis keys of namespace ${namespace}, runs replicas on ports 8081-8083,`);
  say(
    keep
      ? '  and with --keep leaves the database, the keys and the last replica running (see the end)'
      : '  and removes the database and the keys at the end (--keep leaves them, and the last replica running)',
  );
  const admin = await connectAdmin();
  await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${dbName}`);
  await admin.end();
  let finished = false;
  let pool: pg.Pool | undefined;
  const replicas: Replica[] = [];
  try {
    await migrateDatabase(databaseUrl);
    // cronwarden's tables are in their own schema; the demo's own table goes to public.
    pool = new pg.Pool({ connectionString: databaseUrl, options: `-c search_path=public,${DEFAULT_SCHEMA}` });
    await pool.query(
      'CREATE TABLE demo_effects (job text NOT NULL, scheduled_at timestamptz NOT NULL, token bigint NOT NULL)',
    );
    say(`ledger: ${databaseUrl} (migrated); delivery: BullMQ on ${redisUrl}`);
    replicas.push(...['demo-1', 'demo-2', 'demo-3'].map(startReplica));
    const ok = await run(pool, replicas);
    if (keep) await keepSurvivor(replicas);
    finished = true;
    return ok;
  } finally {
    await stopAll(replicas);
    await pool?.end();
    if (!keep) {
      const keys = await cleanUp(targets, namespace);
      say(`cleaned up: dropped database ${dbName}, deleted ${keys} Redis keys of namespace ${namespace}`);
      if (finished)
        say('to look around afterwards: `npm run demo -- --keep` leaves the last replica running until Ctrl-C');
    } else {
      const keys = await countNamespaceKeys(redisUrl, namespace);
      say(`left (--keep): database ${dbName} and ${keys} Redis keys of namespace ${namespace}; to remove them:`);
      for (const c of removalCommands(targets, namespace)) say(`  ${c}`);
    }
  }
}

/** The failovers and the check; true when the ledger checks out. */
async function run(pool: pg.Pool, replicas: Replica[]): Promise<boolean> {
  const byId = (id: string) => replicas.find((r) => r.id === id)!;
  const first = await waitForLeader(0, 30_000);
  say(`three replicas up; leader ${first.id} with fencing token ${first.token}`);
  say(`  consoles while they run: ${replicas.map((r) => `${adminUrlOf(r.id)}/`).join('  ')}`);
  await watch(WATCH_MS);
  const from = new Date(Math.ceil(Date.now() / 1000) * 1000 - WATCH_MS + 2000);

  const stopAt = Date.now();
  say(`stopping the leader ${first.id} gracefully (SIGTERM)…`);
  stop(byId(first.id), 'SIGTERM');
  const second = await waitForLeader(stopAt, 15_000);
  say(`${second.id} took over in ${second.at - stopAt} ms (token ${second.token}): the old leader released its lease`);
  await watch(WATCH_MS);

  const killAt = Date.now();
  say(
    `killing the new leader ${second.id} with SIGKILL (no release; its lease must expire, TTL ${LEASE_TTL_MS / 1000} s)…`,
  );
  stop(byId(second.id), 'SIGKILL');
  const third = await waitForLeader(killAt, 20_000);
  say(
    `${third.id} took over in ${third.at - killAt} ms (token ${third.token}) and caught up the fires missed meanwhile`,
  );
  await watch(WATCH_MS);

  // The window ends a little in the past so its last fires have been committed and delivered;
  // then wait (bounded) until every run in it has finished, re-deliveries of the killed
  // replica's runs included, instead of guessing a sleep.
  const to = new Date(Math.floor(Date.now() / 1000) * 1000 - 2000);
  const open = await drain(pool, from, to);
  if (open > 0) say(`${open} run(s) still unfinished after ${DRAIN_TIMEOUT_MS / 1000} s`);
  assertNoCrash();
  return check(pool, from, to, open);
}

/** --keep: the survivor (the leader now) runs until Ctrl-C; the hints name it, not a stopped one. */
async function keepSurvivor(replicas: Replica[]): Promise<void> {
  const alive = replicas.filter((r) => r.child.exitCode === null && r.child.signalCode === null);
  for (const r of alive) {
    say(
      `--keep: ${r.id} keeps running until Ctrl-C: console ${adminUrlOf(r.id)}/, metrics ${adminUrlOf(r.id)}/metrics`,
    );
    say(`  try: node bin/cronwarden.js status --url ${adminUrlOf(r.id)}`);
    say(`       CRONWARDEN_ADMIN_TOKEN=${adminToken} node bin/cronwarden.js trigger report --url ${adminUrlOf(r.id)}`);
  }
  say(
    `  Ctrl-C stops it and leaves database ${dbName} and namespace ${namespace}'s Redis keys (removal commands then)`,
  );
  if (!interrupt.signal.aborted)
    await new Promise<void>((resolve) => interrupt.signal.addEventListener('abort', () => resolve(), { once: true }));
}

async function stopAll(replicas: Replica[]): Promise<void> {
  for (const r of replicas) if (r.child.exitCode === null && r.child.signalCode === null) stop(r, 'SIGTERM');
  const killer = setTimeout(() => {
    for (const r of replicas) r.child.kill('SIGKILL');
  }, 10_000);
  await Promise.all(replicas.map((r) => r.exited));
  clearTimeout(killer);
}

/**
 * Check the ledger for the window against the example jobs' own policies: every scheduled time
 * of a misfire:'all' job fired exactly once (catch-up included); every run completed, except that
 * a job with overlap 'skip' or 'queue' may record a fire as skipped (the policy working, on
 * record) and overlap 'replace' may record one as cancelled; every completed run wrote its effect
 * exactly once, with the fencing token of the attempt that completed it; a skipped run wrote none.
 */
async function check(pool: pg.Pool, from: Date, to: Date, open: number): Promise<boolean> {
  const expected = new Map<string, number[]>();
  const unchecked: string[] = [];
  for (const job of jobs) {
    if (job.misfire === 'all') expected.set(job.name, job.schedule.between(from.getTime() - 1, to.getTime()));
    else unchecked.push(job.name);
  }
  const history = await readHistory(pool, { from, to });
  // demo_effects has no run id (examples/jobs.ts writes job + scheduled time); join it to its run.
  const effects = await pool.query<{ run_id: string | null; job: string; scheduled_at: Date; token: string }>(
    `SELECT r.id AS run_id, e.job, e.scheduled_at, e.token FROM demo_effects e
     LEFT JOIN cw_runs r ON r.job = e.job AND r.scheduled_at = e.scheduled_at
     WHERE e.scheduled_at BETWEEN $1 AND $2`,
    [from, to],
  );
  history.effects = effects.rows
    .filter((e) => e.run_id !== null)
    .map((e) => ({ runId: BigInt(e.run_id!), token: BigInt(e.token) }));
  const report = checkHistory(history, { expected });
  const violations: Violation[] = [...report.violations];
  for (const e of effects.rows.filter((x) => x.run_id === null)) {
    violations.push({
      invariant: 'I4',
      message: `effect for ${e.job}@${e.scheduled_at.toISOString()} without a run in the ledger`,
    });
  }

  // Completion, as each job's overlap policy allows.
  const runs = await pool.query<{ id: string; job: string; scheduled_at: Date; state: string; error: string | null }>(
    'SELECT id, job, scheduled_at, state, error FROM cw_runs WHERE scheduled_at BETWEEN $1 AND $2 AND trigger <> $3 ORDER BY id',
    [from, to, 'manual'],
  );
  const policy = new Map(jobs.map((j) => [j.name, j.overlap]));
  const effectRuns = new Set(history.effects.map((e) => e.runId.toString()));
  let completed = 0;
  const skipped: string[] = [];
  for (const r of runs.rows) {
    const at = `${r.job}@${r.scheduled_at.toISOString()}`;
    const overlap = policy.get(r.job);
    if (r.state === 'completed') completed++;
    else if (r.state === 'skipped' && (overlap === 'skip' || overlap === 'queue'))
      skipped.push(`${at} (${r.error ?? 'no reason recorded'})`);
    else if (r.state === 'cancelled' && overlap === 'replace')
      skipped.push(`${at} (cancelled: ${r.error ?? 'replaced'})`);
    else violations.push({ invariant: 'completion', message: `${at} is ${r.state}${r.error ? `: ${r.error}` : ''}` });
    if (r.state !== 'completed' && effectRuns.has(r.id))
      violations.push({ invariant: 'I4', message: `${at} is ${r.state} but wrote an effect` });
  }

  const perJob = jobs
    .map(
      (j) =>
        `${j.name} (${j.schedule.toString()}, overlap ${j.overlap}) ${expected.get(j.name)?.length ?? 'unchecked'}`,
    )
    .join(', ');
  say(`window ${from.toISOString()} .. ${to.toISOString()}: ${report.expected} scheduled fires expected: ${perJob}`);
  say(
    `committed ${report.committed}, duplicated ${report.duplicated}, missed ${report.missed}, completed ${completed}, skipped by policy ${skipped.length}, still unfinished ${open}`,
  );
  for (const s of skipped) say(`  skipped on record: ${s}`);
  if (unchecked.length > 0)
    say(
      `  (not checked for gaps: ${unchecked.join(', ')}: their misfire policy may drop times missed during a failover)`,
    );
  const doubled = report.effectsDuplicated;
  say(
    `effects written: ${history.effects.length} for ${completed} completed runs, ${doubled} duplicated, ${report.effectsMissing} missing, ${report.staleEffects} from a stale attempt`,
  );
  if (violations.length === 0) {
    say('no run was duplicated or lost; every effect was written once.');
    return true;
  }
  console.error(`[demo] FAILED: ${violations.length} violation(s):`);
  for (const v of violations.slice(0, 20)) console.error(`[demo]   ${v.invariant}: ${v.message}`);
  if (violations.length > 20) console.error(`[demo]   … and ${violations.length - 20} more`);
  return false;
}

let code = 1;
try {
  if (unknown.length > 0)
    throw new InvalidArgumentError(`unknown argument ${unknown.join(' ')}; use [redis|postgres] [--keep] [--yes]`);
  code = (await main()) ? 0 : 1;
  if (interrupt.signal.aborted && !keep) code = 130;
} catch (err) {
  if (err instanceof AbortedError) {
    say('interrupted');
    code = 130;
  } else console.error(`[demo] FAILED: ${err instanceof Error ? err.message : String(err)}`);
}
process.exit(code);
