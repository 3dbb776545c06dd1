/**
 * What `npm run demo` needs from and does to this machine: checks that PostgreSQL and Redis answer,
 * and if not, says exactly what it would change (packages, pg_hba.conf, servers started), asks
 * (unless --yes), and runs scripts/install-deps.sh --demo and scripts/start-local-services.sh --demo.
 * Afterwards it removes what the demo created: its database and its namespace's Redis keys.
 */
import { spawn } from 'node:child_process';
import { createInterface as createPrompt } from 'node:readline/promises';
import { createInterface } from 'node:readline';
import { Redis } from 'ioredis';
import pg from 'pg';

export interface DemoTargets {
  /** A PostgreSQL URL to create and drop the demo database from (its database: postgres). */
  adminUrl: string;
  redisUrl: string;
  dbName: string;
  root: string;
  say: (line: string) => void;
}

export const DEFAULT_ADMIN_URL = 'postgres://postgres@127.0.0.1:5432/postgres';
export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';
const PROBE_TIMEOUT_MS = 3000;

const masked = (url: string) => url.replace(/:[^:@/]*@/, ':*****@');

/** null when PostgreSQL answers `SELECT 1` as the admin URL's user; otherwise why not. */
async function probePostgres(url: string): Promise<string | null> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: PROBE_TIMEOUT_MS });
  client.on('error', () => undefined);
  try {
    await client.connect();
    await client.query('SELECT 1');
    return null;
  } catch (err) {
    const e = err as Error & { code?: string; errors?: Error[] };
    return e.message || e.errors?.[0]?.message || e.code || String(err);
  } finally {
    await client.end().catch(() => undefined);
  }
}

function redisClient(url: string): Redis {
  const redis = new Redis(url, {
    lazyConnect: true,
    connectTimeout: PROBE_TIMEOUT_MS,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
  });
  redis.on('error', () => undefined); // reported by the command that fails
  return redis;
}

/** null when Redis answers PING; otherwise why not. */
async function probeRedis(url: string): Promise<string | null> {
  const redis = redisClient(url);
  let cause: Error | undefined; // ioredis reports the socket's error here, and "Connection is closed." to the caller
  redis.on('error', (err: Error) => (cause ??= err));
  try {
    await redis.connect();
    await redis.ping();
    return null;
  } catch (err) {
    return cause?.message || (err as Error).message || String(err);
  } finally {
    redis.disconnect();
  }
}

/** Run a script of ours; its output lines go through `say` (indented), or to stderr on failure. */
function runScript(
  t: DemoTargets,
  args: string[],
  capture: boolean,
): Promise<{ code: number | null; lines: string[] }> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', args, {
      cwd: t.root,
      stdio: ['inherit', capture ? 'pipe' : 'inherit', capture ? 'pipe' : 'inherit'],
    });
    const lines: string[] = [];
    if (capture)
      for (const s of [child.stdout!, child.stderr!]) createInterface({ input: s }).on('line', (l) => lines.push(l));
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, lines }));
  });
}

async function ask(question: string): Promise<boolean> {
  const rl = createPrompt({ input: process.stdin, output: process.stdout });
  try {
    // In a terminal, readline takes Ctrl-C as input and emits SIGINT on itself: that is a "no".
    const answer = await new Promise<string>((resolve) => {
      rl.once('SIGINT', () => resolve(''));
      rl.question(question).then(resolve, () => resolve(''));
    });
    return /^y(es)?$/i.test(answer.trim());
  } finally {
    rl.close();
  }
}

/**
 * Make sure PostgreSQL and Redis answer. If both do, nothing on the machine is touched. If not, and
 * they are the local defaults, list the changes, ask (a TTY, without --yes) or refuse (no TTY,
 * without --yes), then install and start them. Throws with the reason when it cannot.
 */
export async function prepareMachine(t: DemoTargets, assumeYes: boolean): Promise<void> {
  let [pgWhy, redisWhy] = await Promise.all([probePostgres(t.adminUrl), probeRedis(t.redisUrl)]);
  if (pgWhy === null && redisWhy === null) {
    t.say(`PostgreSQL ${masked(t.adminUrl)} and Redis ${masked(t.redisUrl)} answer: nothing to install or start`);
    return;
  }
  const notOurs = [
    pgWhy !== null && t.adminUrl !== DEFAULT_ADMIN_URL
      ? `PostgreSQL at ${masked(t.adminUrl)} (CRONWARDEN_DEMO_ADMIN_URL): ${pgWhy}`
      : '',
    redisWhy !== null && t.redisUrl !== DEFAULT_REDIS_URL
      ? `Redis at ${masked(t.redisUrl)} (CRONWARDEN_REDIS_URL): ${redisWhy}`
      : '',
  ].filter(Boolean);
  if (notOurs.length > 0)
    throw new Error(`cannot reach ${notOurs.join('; ')}; the demo sets up only the local defaults`);

  const missing = (await runScript(t, ['scripts/install-deps.sh', '--demo', '--list'], true)).lines.join(' ').trim();
  t.say('to run, the demo must change this machine:');
  if (missing)
    t.say(
      `  - install ${missing} (Debian packages, no recommends) with apt-get${process.getuid?.() === 0 ? '' : ' through sudo'}`,
    );
  if (pgWhy !== null) {
    t.say(`  - PostgreSQL 127.0.0.1:5432 (${pgWhy}): start its Debian cluster if it is down (pg_ctlcluster);`);
    t.say(
      '    if it asks user postgres for a password on 127.0.0.1, add "trust" lines for 127.0.0.1 and ::1 at the top',
    );
    t.say(
      '    of its pg_hba.conf (backup: pg_hba.conf.cronwarden-backup) and reload. It keeps running after the demo.',
    );
  }
  if (redisWhy !== null)
    t.say(
      `  - Redis 127.0.0.1:6379 (${redisWhy}): start redis-server, no persistence. It keeps running after the demo.`,
    );
  if (!assumeYes) {
    if (!process.stdin.isTTY)
      throw new Error(
        'not changing the machine without consent: run `npm run demo -- --yes` (or set CRONWARDEN_DEMO_YES=1) to allow the changes above',
      );
    if (!(await ask('[demo] go ahead? [y/N] '))) throw new Error('stopped: nothing was changed');
  }
  if (missing) {
    const install = await runScript(t, ['scripts/install-deps.sh', '--demo'], false);
    if (install.code !== 0) throw new Error('installing the packages failed (see above)');
  }
  const start = await runScript(t, ['scripts/start-local-services.sh', '--demo'], true);
  for (const line of start.lines.filter((l) => l.startsWith('start-local-services:'))) t.say(`  ${line}`);
  if (start.code !== 0)
    throw new Error(`scripts/start-local-services.sh --demo failed: ${start.lines.slice(-5).join(' | ')}`);
  [pgWhy, redisWhy] = await Promise.all([probePostgres(t.adminUrl), probeRedis(t.redisUrl)]);
  if (pgWhy !== null || redisWhy !== null)
    throw new Error(
      `still unreachable after the set-up: ${[pgWhy && `PostgreSQL: ${pgWhy}`, redisWhy && `Redis: ${redisWhy}`].filter(Boolean).join('; ')}`,
    );
}

/** The Redis key patterns of one namespace: BullMQ's queue, cronwarden's own, the Redis lease's. */
export function namespacePatterns(namespace: string): string[] {
  // bullmq-names.ts: queue "cronwarden-<ns>" under BullMQ's "bull:" prefix, channel "cronwarden:<ns>:…";
  // locks/redis.ts: "cronwarden:lease:" + the lease name "cronwarden/<ns>/scheduler" (+ "#token").
  return [`bull:cronwarden-${namespace}:*`, `cronwarden:${namespace}:*`, `cronwarden:lease:cronwarden/${namespace}/*`];
}

/** Shell commands that remove what a --keep run left. */
export function removalCommands(t: DemoTargets, namespace: string): string[] {
  const patterns = namespacePatterns(namespace)
    .map((p) => `'${p}'`)
    .join(' ');
  return [
    `psql '${t.adminUrl}' -c 'DROP DATABASE IF EXISTS ${t.dbName} WITH (FORCE)'`,
    `for p in ${patterns}; do redis-cli -u ${t.redisUrl} --scan --pattern "$p" | xargs -r redis-cli -u ${t.redisUrl} unlink; done`,
  ];
}

/** How many of the namespace's Redis keys stay (see withoutExpiry). */
export async function countNamespaceKeys(redisUrl: string, namespace: string): Promise<number> {
  return (await namespaceKeys(redisUrl, namespace, false, true)).length;
}

async function namespaceKeys(
  redisUrl: string,
  namespace: string,
  remove: boolean,
  lastingOnly = false,
): Promise<string[]> {
  const redis = redisClient(redisUrl);
  try {
    await redis.connect();
    // A Set: SCAN may return a key twice when the table rehashes under it (other clients writing).
    const found = new Set<string>();
    for (const pattern of namespacePatterns(namespace)) {
      for await (const batch of redis.scanStream({ match: pattern, count: 500 }) as AsyncIterable<string[]>)
        for (const key of batch) found.add(key);
    }
    const keys = lastingOnly ? await withoutExpiry(redis, [...found]) : [...found];
    if (remove && keys.length > 0) await redis.unlink(...keys);
    return keys;
  } finally {
    redis.disconnect();
  }
}

/** Of `keys`, those that stay: a key with an expiry (a job lock, BullMQ's stalled check) goes by itself. */
export async function withoutExpiry(redis: Redis, keys: string[]): Promise<string[]> {
  if (keys.length === 0) return keys;
  const ttls = await Promise.all(keys.map((k) => redis.pttl(k)));
  return keys.filter((_, i) => ttls[i] === -1);
}

/** Drop the demo database and delete the namespace's Redis keys; returns how many keys went. */
export async function cleanUp(t: DemoTargets, namespace: string): Promise<number> {
  const admin = new pg.Client({ connectionString: t.adminUrl });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${t.dbName} WITH (FORCE)`);
  } finally {
    await admin.end();
  }
  return (await namespaceKeys(t.redisUrl, namespace, true)).length;
}
