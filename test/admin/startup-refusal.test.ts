/**
 * `cronwarden start` and `migrate` refuse what cannot work, in one line on stderr, within the
 * connect timeout: an unmigrated ledger, a refused login, unusable lease backend addresses, servers
 * that do not answer (shared PostgreSQL and Redis; closed and silent loopback ports for the rest).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tablesIn } from '../../src/db/tables.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './support.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
/** Give up on a child after this: today's main hangs for ever in most of these cases. */
const HANG_MS = 30_000;
/** Start-up with a 1 s connect timeout must be over well before this (tsx start-up on 2 busy cores included). */
const BOUND_MS = 15_000;

interface Result {
  code: number | null;
  stderr: string;
  ms: number;
}

function cli(args: string[], env: Record<string, string | undefined>): Promise<Result> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const child = spawn(process.execPath, ['bin/cronwarden.js', ...args], {
      cwd: root,
      env: {
        ...process.env,
        CRONWARDEN_ADMIN_TOKEN: undefined,
        CRONWARDEN_LOG_LEVEL: 'silent',
        CRONWARDEN_ADMIN_PORT: '0',
        ...env,
      },
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), HANG_MS);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr, ms: Date.now() - t0 });
    });
  });
}

/** Exactly one line on stderr, matching `message`, with `code`, in time. */
function assertRefused(r: Result, code: number, message: RegExp | string): void {
  assert.notEqual(r.code, null, `still running after ${HANG_MS} ms; stderr: ${r.stderr}`);
  assert.ok(r.stderr.endsWith('\n') && !r.stderr.slice(0, -1).includes('\n'), `not one line: ${r.stderr}`);
  if (typeof message === 'string') assert.equal(r.stderr, `cronwarden: ${message}\n`);
  else assert.match(r.stderr.trimEnd(), message);
  assert.equal(r.code, code, r.stderr);
  assert.ok(r.ms < BOUND_MS, `took ${r.ms} ms`);
}

/** A loopback port that accepts connections and never answers. */
async function silentServer(): Promise<{ port: number; server: Server; sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    s.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as { port: number }).port, server, sockets };
}

async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise((r) => srv.close(r));
  return port;
}

let db: TestDatabase;
let silent: Awaited<ReturnType<typeof silentServer>>;
let closed: number;
const jobs = 'test/admin/fixtures/jobs.ts';

before(async () => {
  db = await createTestDatabase();
  silent = await silentServer();
  closed = await closedPort();
});
after(async () => {
  for (const s of silent.sockets) s.destroy();
  await new Promise((r) => silent.server.close(r));
  await db.drop();
});

/** A memory-backend replica on the migrated test database and the shared Redis, plus `env`. */
const startEnv = (env: Record<string, string> = {}) => ({
  CRONWARDEN_BACKEND: 'memory',
  CRONWARDEN_JOBS: jobs,
  CRONWARDEN_DATABASE_URL: db.url,
  CRONWARDEN_REDIS_URL: SHARED_REDIS_URL,
  CRONWARDEN_CONNECT_TIMEOUT_MS: '1000',
  // The test database's ledger is in its default schema, whatever namespace a case picks.
  CRONWARDEN_SCHEMA: db.schema,
  ...env,
});

describe('start refuses an unmigrated ledger, naming cronwarden migrate', () => {
  it('no cronwarden tables: exit 2', async () => {
    const empty = await createTestDatabase({ migrate: false });
    try {
      const where = `${new URL(empty.url).host}/${empty.name}`;
      for (const backend of ['memory', 'redis']) {
        const r = await cli(['start', '--backend', backend], startEnv({ CRONWARDEN_DATABASE_URL: empty.url }));
        assertRefused(
          r,
          2,
          `the ledger is not migrated (no cronwarden tables in schema "${db.schema}" of ${where}): run \`cronwarden migrate\``,
        );
      }
    } finally {
      await empty.drop();
    }
  });

  it('migrations of this version missing: exit 2 with how many', async () => {
    const old = await createTestDatabase();
    try {
      const journal = tablesIn(old.schema).journal;
      const total = (await old.pool.query(`SELECT count(*)::int AS n FROM ${journal}`)).rows[0].n as number;
      await old.pool.query(`DELETE FROM ${journal} WHERE created_at = (SELECT max(created_at) FROM ${journal})`);
      const r = await cli(['start'], startEnv({ CRONWARDEN_DATABASE_URL: old.url }));
      assertRefused(
        r,
        2,
        `the ledger is not migrated (1 of ${total} migrations missing in ${new URL(old.url).host}/${old.name}): run \`cronwarden migrate\``,
      );
    } finally {
      await old.drop();
    }
  });
});

describe('start refuses servers it cannot use, in one line', () => {
  it('a refused database login or a missing database: exit 2, for start and migrate', async () => {
    const noRole = new URL(db.url);
    noRole.username = 'cw_no_such_role';
    noRole.password = 'hunter2-secret';
    const r = await cli(['start'], startEnv({ CRONWARDEN_DATABASE_URL: noRole.toString() }));
    assertRefused(
      r,
      2,
      'PostgreSQL refused access: role "cw_no_such_role" does not exist; check CRONWARDEN_DATABASE_URL (--database-url)',
    );
    const m = await cli(['migrate', '--database-url', noRole.toString()], {});
    assertRefused(
      m,
      2,
      'PostgreSQL refused access: role "cw_no_such_role" does not exist; check CRONWARDEN_DATABASE_URL (--database-url)',
    );
    const noDb = new URL(db.url);
    noDb.pathname = '/cw_no_such_database';
    const d = await cli(['start'], startEnv({ CRONWARDEN_DATABASE_URL: noDb.toString() }));
    assertRefused(
      d,
      2,
      'PostgreSQL refused access: database "cw_no_such_database" does not exist; check CRONWARDEN_DATABASE_URL (--database-url)',
    );
  });

  it('an unreachable or silent Redis: exit 1 within the connect timeout, one line instead of a hang', async () => {
    const refused = await cli(['start'], startEnv({ CRONWARDEN_REDIS_URL: `redis://127.0.0.1:${closed}` }));
    assertRefused(
      refused,
      1,
      `Redis unavailable: connect ECONNREFUSED 127.0.0.1:${closed}; check CRONWARDEN_REDIS_URL (--redis-url)`,
    );
    const mute = await cli(['start'], startEnv({ CRONWARDEN_REDIS_URL: `redis://127.0.0.1:${silent.port}` }));
    assertRefused(
      mute,
      1,
      'Redis unavailable: PING: no answer within 1000 ms; check CRONWARDEN_REDIS_URL (--redis-url)',
    );
  });

  it('a Redis that refuses the login: exit 2, the password not echoed', async () => {
    const r = await cli(
      ['start'],
      startEnv({ CRONWARDEN_REDIS_URL: `redis://cw_no_such_user:hunter2-secret@${new URL(SHARED_REDIS_URL).host}` }),
    );
    assertRefused(r, 2, /^cronwarden: Redis refused access: WRONGPASS .*; check CRONWARDEN_REDIS_URL \(--redis-url\)$/);
    assert.doesNotMatch(r.stderr, /hunter2/);
  });

  it('lease backend addresses: garbage, http:// for redis and etcd garbage exit 2; unreachable ones exit 1 in time', async () => {
    const shape: [string[], string][] = [
      [
        ['--backend', 'redis', '--backend-url', 'garbage'],
        'CRONWARDEN_BACKEND_URL (--backend-url): must be a URL starting with redis:// or rediss:// for the redis backend',
      ],
      [
        ['--backend', 'redis', '--backend-url', `http://127.0.0.1:${closed}`],
        'CRONWARDEN_BACKEND_URL (--backend-url): must be a URL starting with redis:// or rediss:// for the redis backend',
      ],
      [
        ['--backend', 'postgres', '--backend-url', 'garbage'],
        'CRONWARDEN_BACKEND_URL (--backend-url): must be a URL starting with postgres:// or postgresql:// for the postgres backend',
      ],
      [
        ['--backend', 'etcd', '--etcd-endpoints', 'garbage'],
        'CRONWARDEN_ETCD_ENDPOINTS (--etcd-endpoints): must be comma-separated URLs starting with http:// or https://',
      ],
    ];
    for (const [args, message] of shape) assertRefused(await cli(['start', ...args], startEnv()), 2, message);

    const reach: [string[], RegExp][] = [
      [
        ['--backend', 'etcd', '--etcd-endpoints', `http://127.0.0.1:${closed}`],
        /^cronwarden: etcd unavailable: .*ECONNREFUSED.*; check CRONWARDEN_ETCD_ENDPOINTS \(--etcd-endpoints\)$/,
      ],
      [
        ['--backend', 'etcd', '--etcd-endpoints', `http://127.0.0.1:${silent.port}`],
        /^cronwarden: etcd unavailable: .*; check CRONWARDEN_ETCD_ENDPOINTS \(--etcd-endpoints\)$/,
      ],
      [
        ['--backend', 'redis', '--backend-url', `redis://127.0.0.1:${silent.port}`],
        /^cronwarden: redis unavailable: lease read: no answer within 1000 ms; check CRONWARDEN_BACKEND_URL \(--backend-url\)$/,
      ],
      [
        ['--backend', 'postgres', '--backend-url', `postgres://postgres@127.0.0.1:${closed}/x`],
        new RegExp(
          `^cronwarden: postgres unavailable: connect ECONNREFUSED 127.0.0.1:${closed}; check CRONWARDEN_BACKEND_URL \\(--backend-url\\)$`,
        ),
      ],
    ];
    for (const [args, message] of reach) assertRefused(await cli(['start', ...args], startEnv()), 1, message);
  });

  it('migrate gives up on a silent server after --connect-timeout-ms, with one line and exit 1', async () => {
    const r = await cli(
      ['migrate', '--database-url', `postgres://postgres@127.0.0.1:${silent.port}/x`, '--connect-timeout-ms', '1000'],
      {},
    );
    assertRefused(r, 1, 'PostgreSQL unavailable: no connection within 1000 ms');
    const env = await cli(['migrate', '--database-url', `postgres://postgres@127.0.0.1:${silent.port}/x`], {
      CRONWARDEN_CONNECT_TIMEOUT_MS: '800',
    });
    assertRefused(env, 1, 'PostgreSQL unavailable: no connection within 800 ms');
  });

  it('a config file that is a FIFO does not block start: refused at once', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'cw-fifo-'));
    try {
      const fifo = join(dir, 'config.json');
      execFileSync('mkfifo', [fifo]);
      assertRefused(
        await cli(['start', '--config', fifo], startEnv()),
        2,
        `CRONWARDEN_CONFIG (--config): ${fifo}: is not a regular file`,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('with everything in order, the same settings start a replica (the checks pass)', async () => {
    const child = spawn(process.execPath, ['bin/cronwarden.js', 'start'], {
      cwd: root,
      env: {
        ...process.env,
        ...startEnv({ CRONWARDEN_LOG_LEVEL: 'info', CRONWARDEN_NAMESPACE: `refusal${process.pid}` }),
      },
    });
    const exited = new Promise((r) => child.once('exit', r));
    let out = '';
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`no "admin HTTP listening" within ${HANG_MS} ms: ${out}`)),
          HANG_MS,
        );
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          if (out.includes('"admin HTTP listening"')) {
            clearTimeout(timer);
            resolve();
          }
        });
        child.on('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
      });
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  });
});
