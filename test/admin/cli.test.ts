/**
 * The cronwarden CLI against real `cronwarden start` processes (postgres lease backend, shared
 * PostgreSQL and Redis): status, trigger/pause/resume/resign through any replica, exit codes,
 * --help, config errors, and SIGTERM handing leadership over with exit 0.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { faultKinds } from '../../src/drill/faults.js';
import { EventedChild } from '../support/evented-child.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { ADMIN_TOKEN, SHARED_REDIS_URL } from './support.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = 'bin/cronwarden.js';
const namespace = `cli${randomUUID().slice(0, 8)}`;

type Log = { msg?: string; adminUrl?: string; token?: string; [k: string]: unknown };

/** `cronwarden start` in a child process, its pino log lines kept as events. */
class StartedReplica extends EventedChild<Log> {
  constructor(id: string, databaseUrl: string) {
    super(
      id,
      [
        bin,
        'start',
        '--backend',
        'postgres',
        '--jobs',
        'test/admin/fixtures/jobs.ts',
        '--replica-id',
        id,
        '--namespace',
        namespace,
        '--schema',
        'cronwarden',
        '--lease-ttl-ms',
        '3000',
        '--admin-port',
        '0',
        '--probe-port',
        '0',
        '--shutdown-grace-ms',
        '1000',
      ],
      {
        cwd: root,
        env: {
          ...process.env,
          CRONWARDEN_DATABASE_URL: databaseUrl,
          CRONWARDEN_REDIS_URL: SHARED_REDIS_URL,
          CRONWARDEN_ADMIN_TOKEN: ADMIN_TOKEN,
        },
      },
    );
  }

  get logs(): Log[] {
    return this.events;
  }

  /** The first log line with message `msg` from index `since` on. */
  // Generous: in a source checkout each replica loads its TypeScript twice (main and admin thread).
  waitForLog(msg: string, timeoutMs = 60_000, since = 0): Promise<Log> {
    return this.waitFor((l) => l.msg === msg, timeoutMs, since);
  }

  get leading(): boolean {
    const last = [...this.logs].reverse().find((l) => l.msg === 'elected leader' || l.msg === 'leadership ended');
    return last?.msg === 'elected leader';
  }
}

function cli(
  args: string[],
  env: Record<string, string | undefined> = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bin, ...args], {
      cwd: root,
      env: { ...process.env, CRONWARDEN_ADMIN_TOKEN: ADMIN_TOKEN, ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

let db: TestDatabase;
const replicas: StartedReplica[] = [];
let leader: StartedReplica;
let follower: StartedReplica;
const urls = new Map<StartedReplica, string>();

before(async () => {
  db = await createTestDatabase();
  replicas.push(
    new StartedReplica('cli-a', db.url),
    new StartedReplica('cli-b', db.url),
    new StartedReplica('cli-c', db.url),
  );
  all.push(...replicas);
  for (const r of replicas) urls.set(r, (await r.waitForLog('admin HTTP listening')).adminUrl!);
  await Promise.any(replicas.map((r) => r.waitForLog('elected leader')));
  leader = replicas.find((r) => r.leading)!;
  follower = replicas.find((r) => r !== leader)!;
  // Both member rows (with admin URLs) are written once each replica's admin HTTP listens.
  await waitUntil(
    async () => (await db.pool.query('SELECT 1 FROM cw_members WHERE admin_url IS NOT NULL')).rowCount === 3,
  );
});
const all: StartedReplica[] = [];
after(async () => {
  for (const r of all) r.child.kill('SIGKILL');
  await Promise.all(all.map((r) => r.exited));
  await db.drop();
});

describe('cronwarden CLI against running replicas', () => {
  it('start --probe-port serves /healthz and /readyz on a listener of its own', async () => {
    const probeUrl = String((await follower.waitForLog('probes (/healthz, /readyz) listening')).probeUrl);
    assert.notEqual(probeUrl, urls.get(follower));
    const health = await fetch(`${probeUrl}/healthz`);
    assert.equal(health.status, 200);
    const body = (await health.json()) as { ok: boolean; role: string; replicaId: string };
    assert.deepEqual([body.ok, body.replicaId], [true, follower.id]);
    assert.notEqual(body.role, 'leader');
    assert.equal((await fetch(`${probeUrl}/readyz`)).status, 200);
  });

  it('status (asked of the follower) shows the leader, token, TTL left, members and jobs', async () => {
    const { code, stdout, stderr } = await cli(['status', '--url', urls.get(follower)!]);
    assert.equal(code, 0, stderr);
    assert.match(stdout, new RegExp(`^leader\\s+${leader.id}\\s+token \\d+\\s+expires in \\d+ ms`, 'm'));
    assert.match(stdout, new RegExp(`^${follower.id}\\s`, 'm'));
    assert.match(stdout, new RegExp(`^${leader.id}\\s+leader\\s`, 'm'));
    assert.match(stdout, /^tick\s+\*\/2 \* \* \* \* \*\s+UTC/m);
    assert.match(stdout, /^yearly\s+0 0 1 1 \*\s+Europe\/Berlin/m);
    const json = await cli(['status', '--json', '--url', urls.get(leader)!]);
    assert.equal(JSON.parse(json.stdout).lease.holder, leader.id);
  });

  it('trigger sent to a follower is followed to the leader and commits one manual run', async () => {
    const { code, stdout, stderr } = await cli(['trigger', 'yearly', '--url', urls.get(follower)!]);
    assert.equal(code, 0, stderr);
    assert.match(
      stdout,
      new RegExp(
        `^triggered yearly: run (\\d+) .*leader ${leader.id}, ${urls.get(leader)!.replace(/[.]/g, '\\.')}\\)$`,
        'm',
      ),
    );
    const runId = /run (\d+)/.exec(stdout)![1];
    const row = await db.pool.query('SELECT job, trigger, leader_id FROM cw_runs WHERE id = $1', [runId]);
    assert.deepEqual(row.rows[0], { job: 'yearly', trigger: 'manual', leader_id: leader.id });
  });

  it('pause and resume change the ledger', async () => {
    const p = await cli(['pause', 'tick', '--url', urls.get(follower)!]);
    assert.equal(p.code, 0, p.stderr);
    assert.match(p.stdout, /^tick: paused by admin( \([^)]+\))? until resumed\n$/);
    assert.equal((await db.pool.query("SELECT paused FROM cw_job_state WHERE job = 'tick'")).rows[0].paused, true);
    const r = await cli(['resume', 'tick', '--url', urls.get(leader)!]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal((await db.pool.query("SELECT paused FROM cw_job_state WHERE job = 'tick'")).rows[0].paused, false);
  });

  it('pause --reason --until records who, why and until; status shows them; a past until is refused', async () => {
    const until = new Date(Math.ceil((Date.now() + 3_600_000) / 1000) * 1000).toISOString();
    const p = await cli([
      'pause',
      'tick',
      '--reason',
      'ledger migration',
      '--until',
      until,
      '--url',
      urls.get(follower)!,
    ]);
    assert.equal(p.code, 0, p.stderr);
    assert.match(
      p.stdout,
      new RegExp(`^tick: paused by admin( \\([^)]+\\))? until ${until.replace(/[.]/g, '\\.')}: ledger migration\n$`),
    );
    const row = await db.pool.query("SELECT paused_reason, paused_until FROM cw_job_state WHERE job = 'tick'");
    assert.deepEqual([row.rows[0].paused_reason, row.rows[0].paused_until.toISOString()], ['ledger migration', until]);
    const status = await cli(['status', '--url', urls.get(leader)!]);
    assert.match(
      status.stdout,
      new RegExp(`^PAUSED$[\\s\\S]*^tick\\s+admin.*${until.replace(/[.]/g, '\\.')}\\s+ledger migration$`, 'm'),
    );
    const past = await cli(['pause', 'tick', '--until', '2001-01-01T00:00:00Z', '--url', urls.get(leader)!]);
    assert.equal(past.code, 2);
    assert.match(past.stderr, /^cronwarden: .*until: must be in the future/);
    assert.equal((await cli(['resume', 'tick', '--url', urls.get(leader)!])).code, 0);
  });

  it('next lists upcoming fires with their offsets', async () => {
    const { code, stdout, stderr } = await cli(['next', 'yearly', '--count', '2', '--url', urls.get(follower)!]);
    assert.equal(code, 0, stderr);
    const year = new Date().getUTCFullYear() + 1;
    assert.match(stdout, /^yearly {2}0 0 1 1 \* {2}Europe\/Berlin {2}dstRepeat first, dstGap shift$/m);
    assert.match(
      stdout,
      new RegExp(`^${year - 1}-12-31T23:00:00\\.000Z  ${year}-01-01T00:00:00\\+01:00  \\+01:00$`, 'm'),
    );
    assert.equal(stdout.trim().split('\n').length, 4, stdout);
    const bad = await cli(['next', 'yearly', '--count', '0', '--url', urls.get(follower)!]);
    assert.equal(bad.code, 2);
  });

  it('errors are one line with exit 2 for usage (unknown job, no/wrong token) and 1 for an unreachable replica', async () => {
    const unknown = await cli(['trigger', 'nope', '--url', urls.get(leader)!]);
    assert.equal(unknown.code, 2);
    assert.equal(unknown.stderr, 'cronwarden: POST /api/jobs/nope/trigger: 404 unknown job "nope"\n');
    const noToken = await cli(['pause', 'tick', '--url', urls.get(leader)!], { CRONWARDEN_ADMIN_TOKEN: '' });
    assert.equal(noToken.code, 2);
    assert.match(noToken.stderr, /^cronwarden: CRONWARDEN_ADMIN_TOKEN: is required/);
    const wrong = await cli(['pause', 'tick', '--url', urls.get(leader)!], {
      CRONWARDEN_ADMIN_TOKEN: 'not-the-token-at-all',
    });
    assert.equal(wrong.code, 2);
    assert.match(wrong.stderr, /401 missing or wrong bearer token\n$/);
    assert.equal((await db.pool.query("SELECT paused FROM cw_job_state WHERE job = 'tick'")).rows[0].paused, false);
    const port = await closedPort();
    const dead = await cli(['status', '--url', `http://127.0.0.1:${port}`]);
    assert.equal(dead.code, 1);
    assert.equal(dead.stderr, `cronwarden: cannot reach http://127.0.0.1:${port}: ECONNREFUSED\n`);
    const usage = await cli(['trigger']);
    assert.equal(usage.code, 2);
  });

  it('--help works on every command', async () => {
    for (const cmd of ['start', 'status', 'trigger', 'pause', 'resume', 'next', 'resign', 'migrate']) {
      const { code, stdout } = await cli([cmd, '--help']);
      assert.equal(code, 0, cmd);
      assert.match(stdout, new RegExp(`^Usage: cronwarden ${cmd}`), cmd);
    }
  });

  it('a wrong start-up setting stops with exit 2, names the setting, and never echoes a secret', async () => {
    const bad = await cli(['start', '--backend', 'postgres', '--jobs', 'test/admin/fixtures/jobs.ts'], {
      CRONWARDEN_DATABASE_URL: 'mysql://app:hunter2secret@db/app',
      CRONWARDEN_REDIS_URL: SHARED_REDIS_URL,
    });
    assert.equal(bad.code, 2);
    assert.equal(
      bad.stderr,
      'cronwarden: CRONWARDEN_DATABASE_URL (--database-url): must be a URL starting with postgres:// or postgresql://\n',
    );
    const shortToken = await cli(['start', '--backend', 'postgres', '--jobs', 'test/admin/fixtures/jobs.ts'], {
      CRONWARDEN_DATABASE_URL: db.url,
      CRONWARDEN_REDIS_URL: SHARED_REDIS_URL,
      CRONWARDEN_ADMIN_TOKEN: 'short',
    });
    assert.equal(shortToken.code, 2);
    assert.match(shortToken.stderr, /^cronwarden: CRONWARDEN_ADMIN_TOKEN: must be at least 16 characters/);
    assert.doesNotMatch(shortToken.stderr, /short\b(?! token)/);
  });

  it('the start-up log masks the database password and the admin token', () => {
    const starting = leader.logs.find((l) => l.msg === 'starting replica')!;
    const text = JSON.stringify(starting);
    assert.ok(!text.includes(ADMIN_TOKEN), text);
    assert.match(text, /"token":"\*\*\*\*\*"/);
  });

  it('SIGTERM of the leader: another replica leads within a second or so and the process exits 0', async () => {
    const others = replicas.filter((r) => r !== leader);
    const marks = others.map((r) => r.logs.length);
    const t0 = Date.now();
    leader.child.kill('SIGTERM');
    const next = await Promise.any(
      others.map((r, i) => r.waitForLog('elected leader', 10_000, marks[i]).then(() => r)),
    );
    const took = Date.now() - t0;
    assert.equal(await leader.exited, 0, JSON.stringify(leader.logs.slice(-4)));
    // Released on the way out: far below the 3 s TTL a crash would cost (slack for 2 busy cores).
    assert.ok(took < 1500, `took ${took} ms`);
    assert.ok(leader.logs.some((l) => l.msg === 'replica stopped'));
    assert.equal((await db.pool.query('SELECT 1 FROM cw_members WHERE replica_id = $1', [leader.id])).rowCount, 0);
    replicas.splice(replicas.indexOf(leader), 1);
    leader = next;
    follower = replicas.find((r) => r !== next)!;
  });
  it('resign (via the follower) hands leadership to the other replica', async () => {
    const since = follower.logs.length;
    const { code, stdout, stderr } = await cli(['resign', '--url', urls.get(follower)!]);
    assert.equal(code, 0, stderr);
    assert.match(stdout, new RegExp(`^${leader.id} resigned \\(token \\d+\\)$`, 'm'));
    const elected = await follower.waitForLog('elected leader', 10_000, since);
    assert.ok(BigInt(elected.token!) > 0n);
    [leader, follower] = [follower, leader];
  });
});

/** The non-empty lines of a stream's output. */
const linesOf = (text: string) => text.split('\n').filter((l) => l.trim() !== '');

describe('cronwarden CLI: one-line errors, exit codes, migrate, drill --help', () => {
  it('a usage error (unknown option, missing argument, unknown command) is one line on stderr with exit 2', async () => {
    const cases: [string[], RegExp][] = [
      [['status', '--bogus'], /^cronwarden: unknown option '--bogus' \(see cronwarden status --help\)$/],
      [
        ['status', '--jsn'],
        /^cronwarden: unknown option '--jsn' \(Did you mean --json\?\) \(see cronwarden status --help\)$/,
      ],
      [['trigger'], /^cronwarden: missing required argument 'job' \(see cronwarden trigger --help\)$/],
      [
        ['migrate', '--database-url'],
        /^cronwarden: option '--database-url <url>' argument missing \(see cronwarden migrate --help\)$/,
      ],
      [['no-such-command'], /^cronwarden: unknown command 'no-such-command' \(see cronwarden --help\)$/],
    ];
    for (const [args, message] of cases) {
      const { code, stdout, stderr } = await cli(args);
      assert.equal(code, 2, args.join(' '));
      assert.equal(stdout, '', args.join(' '));
      assert.equal(linesOf(stderr).length, 1, `${args.join(' ')}: ${stderr}`);
      assert.ok(stderr.endsWith('\n') && !stderr.slice(0, -1).includes('\n'), stderr);
      assert.match(stderr.trimEnd(), message);
    }
  });

  it('a configuration error on start is one line on stderr with exit 2', async () => {
    const bad = await cli(['start', '--backend', 'postgres', '--jobs', 'test/admin/fixtures/jobs.ts'], {
      CRONWARDEN_DATABASE_URL: 'not-a-url',
      CRONWARDEN_REDIS_URL: SHARED_REDIS_URL,
    });
    assert.equal(bad.code, 2);
    assert.deepEqual(linesOf(bad.stderr), [
      'cronwarden: CRONWARDEN_DATABASE_URL (--database-url): must be a URL starting with postgres:// or postgresql://',
    ]);
    assert.equal(bad.stdout, '');
    const wrongScheme = await cli(['migrate'], { CRONWARDEN_DATABASE_URL: 'mysql://app:hunter2secret@db/app' });
    assert.equal(wrongScheme.code, 2);
    assert.equal(linesOf(wrongScheme.stderr).length, 1, wrongScheme.stderr);
    assert.doesNotMatch(wrongScheme.stderr, /hunter2secret/);
  });

  it('migrate creates the ledger tables in an empty database, in its own schema, and a second run changes nothing', async () => {
    const scratch = await createTestDatabase({ migrate: false });
    try {
      const tables = async () =>
        (
          await scratch.pool.query<{ t: string }>(
            "SELECT table_name AS t FROM information_schema.tables WHERE table_schema = 'cronwarden' ORDER BY 1",
          )
        ).rows.map((r) => r.t);
      const elsewhere = async () =>
        (
          await scratch.pool.query<{ n: string }>(
            "SELECT nspname AS n FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' AND nspname NOT IN ('information_schema', 'public', 'cronwarden')",
          )
        ).rows.map((r) => r.n);
      const inPublic = async () =>
        (
          await scratch.pool.query(
            "SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'",
          )
        ).rowCount;
      assert.deepEqual(await tables(), []);
      const first = await cli(['migrate'], { CRONWARDEN_DATABASE_URL: scratch.url });
      assert.equal(first.code, 0, first.stderr);
      assert.equal(first.stdout, 'migrations applied\n');
      const created = await tables();
      for (const t of ['cw_runs', 'cw_run_attempts', 'cw_job_state', 'cw_members', 'cw_fences', '__drizzle_migrations'])
        assert.ok(created.includes(t), `${t} in ${created.join(', ')}`);
      assert.equal(await inPublic(), 0, 'nothing of cronwarden in public');
      assert.deepEqual(await elsewhere(), [], 'no other schema (no "drizzle")');
      const applied = async () =>
        (await scratch.pool.query('SELECT count(*)::int AS n FROM cronwarden.__drizzle_migrations')).rows[0]
          .n as number;
      const migrations = await applied();
      assert.ok(migrations > 0);
      // Idempotent, and the flag works as well as the environment variable.
      const second = await cli(['migrate', '--database-url', scratch.url], { CRONWARDEN_DATABASE_URL: '' });
      assert.equal(second.code, 0, second.stderr);
      assert.equal(second.stderr, '');
      assert.deepEqual(await tables(), created);
      assert.equal(await applied(), migrations);
    } finally {
      await scratch.drop();
    }
  });

  it('an unreachable database makes migrate exit 1 with one line', async () => {
    const port = await closedPort();
    const dead = await cli(['migrate', '--database-url', `postgres://postgres@127.0.0.1:${port}/x`]);
    assert.equal(dead.code, 1);
    assert.deepEqual(linesOf(dead.stderr), [`cronwarden: connect ECONNREFUSED 127.0.0.1:${port}`]);
  });

  it('drill --help exits 0 and lists every fault kind', async () => {
    const { code, stdout, stderr } = await cli(['drill', '--help']);
    assert.equal(code, 0, stderr);
    assert.match(stdout, /^Usage: cronwarden drill/);
    const text = stdout.replace(/\s+/g, ' ');
    const listed = /--faults <kinds> comma-separated: (.*?) \(default/.exec(text)?.[1]?.split(/, */);
    assert.deepEqual(listed, [...faultKinds], text);
  });

  it('drill --shards: refused outside 1..256 with one line and exit 2, before anything starts', async () => {
    for (const n of ['0', '257', '2.5']) {
      const { code, stdout, stderr } = await cli(['drill', '--shards', n]);
      assert.equal(code, 2, `--shards ${n}: ${stderr}`);
      assert.equal(stdout, '');
      assert.deepEqual(linesOf(stderr), [
        n === '2.5'
          ? 'cronwarden: --shards: Invalid input: expected int, received number'
          : 'cronwarden: --shards: must be from 1 to 256',
      ]);
    }
  });

  it('--version prints the version and exits 0', async () => {
    const { code, stdout } = await cli(['--version']);
    assert.equal(code, 0);
    assert.match(stdout, /^\d+\.\d+\.\d+/);
  });

  it('a CRONWARDEN_ variable a few letters from a known one is named with it in a warning', async () => {
    const { code, stderr } = await cli(['--version'], {
      CRONWARDEN_LEASE_TTL: '5000',
      CRONWARDEN_ADMN_URL: 'http://127.0.0.1:1',
      CRONWARDEN_DEMO_YES: '1', // the demo's own: not a typo of anything
    });
    assert.equal(code, 0);
    assert.deepEqual(stderr.trim().split('\n'), [
      'cronwarden: warning: CRONWARDEN_ADMN_URL is not a cronwarden variable and is ignored; did you mean CRONWARDEN_ADMIN_URL?',
      'cronwarden: warning: CRONWARDEN_LEASE_TTL is not a cronwarden variable and is ignored; did you mean CRONWARDEN_LEASE_TTL_MS?',
    ]);
  });
});

describe('cronwarden CLI: where the admin token may go', () => {
  /** A fake replica: answers POSTs 409 naming `leaderAdminUrl`, lists `members`, records every request. */
  async function fakeReplica(
    answer: () => { leaderAdminUrl: string; members: { replicaId: string; adminUrl: string }[] },
  ) {
    const { createServer } = await import('node:http');
    const seen: { method: string; url: string; authorization?: string }[] = [];
    const srv = createServer((req, res) => {
      seen.push({ method: req.method!, url: req.url!, authorization: req.headers.authorization });
      res.setHeader('content-type', 'application/json');
      if (req.method === 'GET' && req.url === '/api/members')
        return res.end(JSON.stringify({ members: answer().members }));
      res.statusCode = 409;
      res.end(
        JSON.stringify({
          error: 'not the leader',
          code: 'not_leader',
          leader: 'cli-x',
          leaderAdminUrl: answer().leaderAdminUrl,
        }),
      );
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
    return { url, seen, close: () => new Promise((r) => srv.close(r)) };
  }

  it('a 409 naming a URL no member advertises is not followed: the token never reaches it, exit 2 with the URL named', async () => {
    const foreign = await fakeReplica(() => ({ leaderAdminUrl: 'unused', members: [] }));
    const asked = await fakeReplica(() => ({
      leaderAdminUrl: foreign.url,
      members: [{ replicaId: 'cli-x', adminUrl: 'http://127.0.0.1:1' }],
    }));
    try {
      const res = await cli(['trigger', 'yearly', '--url', asked.url]);
      assert.equal(res.code, 2, res.stderr);
      assert.equal(linesOf(res.stderr).length, 1, res.stderr);
      assert.match(
        res.stderr,
        new RegExp(
          `names ${foreign.url.replace(/[.]/g, '\\.')} as the leader's admin URL, but no member "cli-x" advertises it, so the admin token was not sent there`,
        ),
      );
      assert.deepEqual(
        foreign.seen.filter((r) => r.authorization !== undefined),
        [],
      );
      assert.deepEqual(foreign.seen, []);
      // The replica the operator named did get the token (that is where it was sent), and was asked
      // who the members are, with the token too (reads may need it: adminReadsNeedToken).
      assert.equal(asked.seen[0]!.authorization, `Bearer ${ADMIN_TOKEN}`);
      assert.ok(
        asked.seen.some(
          (r) => r.method === 'GET' && r.url === '/api/members' && r.authorization === `Bearer ${ADMIN_TOKEN}`,
        ),
      );
    } finally {
      await asked.close();
      await foreign.close();
    }
  });

  it('a 409 naming a member over another scheme is not followed either', async () => {
    const other = await fakeReplica(() => ({ leaderAdminUrl: 'unused', members: [] }));
    const httpsUrl = other.url.replace('http:', 'https:');
    const asked = await fakeReplica(() => ({
      leaderAdminUrl: httpsUrl,
      members: [{ replicaId: 'cli-x', adminUrl: httpsUrl }],
    }));
    try {
      const res = await cli(['pause', 'tick', '--url', asked.url]);
      assert.equal(res.code, 2, res.stderr);
      assert.match(
        res.stderr,
        /but it is not http like http:\/\/127\.0\.0\.1:\d+, so the admin token was not sent there/,
      );
      assert.deepEqual(other.seen, []);
    } finally {
      await asked.close();
      await other.close();
    }
  });

  it('status --url garbage exits 2 with one line naming the flag', async () => {
    for (const url of ['garbage', 'ftp://127.0.0.1:8080', '']) {
      const res = await cli(['status', '--url', url]);
      assert.equal(res.code, 2, `${url}: ${res.stderr}`);
      assert.deepEqual(linesOf(res.stderr), [
        'cronwarden: --url (env CRONWARDEN_ADMIN_URL): must be an http:// or https:// URL such as http://127.0.0.1:8080',
      ]);
    }
  });
});

/** A loopback port nobody listens on. */
async function closedPort(): Promise<number> {
  const { createServer } = await import('node:net');
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
}

async function waitUntil(check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 100));
  }
}
