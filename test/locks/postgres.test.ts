/**
 * The PostgreSQL lease backend against the shared server: the conformance suite unchanged, then what
 * is particular to this backend (the database clock decides, re-entry, the token floor, a caller's
 * pool). Each run uses a fresh migrated database, dropped at the end.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { leaseConformance } from './conformance.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { PostgresLeaseBackend } from '../../src/locks/postgres.js';
import { systemClock, type Clock } from '../../src/clock.js';
import { BackendUnavailableError, InvalidArgumentError, InvalidConfigError, LeaseLostError } from '../../src/errors.js';

let conformanceDb: TestDatabase | undefined;
leaseConformance('postgres', {
  setup: async () => {
    conformanceDb = await createTestDatabase();
  },
  connect: async () => new PostgresLeaseBackend({ connectionString: conformanceDb!.url }),
  teardown: async () => {
    await conformanceDb?.drop();
  },
});

/** A clock that is an hour ahead on both wall and monotonic time: the database must not care. */
const skewedClock = (offsetMs: number): Clock => ({
  ...systemClock,
  now: () => Date.now() + offsetMs,
  monotonic: () => performance.now() + offsetMs,
});

describe('postgres lease backend', () => {
  let db: TestDatabase;
  const opened: PostgresLeaseBackend[] = [];
  const open = (options: Partial<ConstructorParameters<typeof PostgresLeaseBackend>[0]> = {}) => {
    const backend = new PostgresLeaseBackend({ connectionString: db.url, ...options });
    opened.push(backend);
    return backend;
  };
  const uniqueName = () => `pg-${randomUUID().slice(0, 8)}`;

  before(async () => {
    db = await createTestDatabase();
  });
  after(async () => {
    await Promise.all(opened.map((b) => b.close()));
    await db.drop();
  });

  it('the database clock decides: a replica whose clock runs an hour ahead cannot take a live lease', async () => {
    const honest = open();
    const ahead = open({ clock: skewedClock(3_600_000) });
    const behind = open({ clock: skewedClock(-3_600_000) });
    const name = uniqueName();
    const held = await honest.tryAcquire({ name, holder: 'A', ttlMs: 5000 });
    assert.ok(held);
    assert.equal(await ahead.tryAcquire({ name, holder: 'B', ttlMs: 5000 }), null, 'a fast clock took a live lease');
    const record = await ahead.current(name);
    assert.equal(record?.holder, 'A');
    assert.ok(
      record.expiresInMs > 4000 && record.expiresInMs <= 5000,
      `expiresInMs ${record.expiresInMs} not from the DB clock`,
    );
    // A slow clock holds the lease no longer than the database says: expiry is on the DB clock.
    const name2 = uniqueName();
    const slow = await behind.tryAcquire({ name: name2, holder: 'S', ttlMs: 300 });
    assert.ok(slow);
    assert.ok(slow.deadline < performance.now(), 'deadline is on the injected (skewed) monotonic clock');
    await sleep(500); // past the TTL
    await assert.rejects(behind.renew(slow), LeaseLostError);
    const taken = await honest.tryAcquire({ name: name2, holder: 'A', ttlMs: 5000 });
    assert.ok(taken && taken.token > slow.token);
    await honest.release(held);
    await honest.release(taken);
  });

  it('re-entry by the live holder keeps the token and extends the expiry; a new tenure does not', async () => {
    const a = open();
    const name = uniqueName();
    const first = await a.tryAcquire({ name, holder: 'A', ttlMs: 1000 });
    assert.ok(first);
    await sleep(400);
    const before = await a.current(name);
    const again = await a.tryAcquire({ name, holder: 'A', ttlMs: 5000 });
    assert.ok(again);
    assert.equal(again.token, first.token);
    assert.ok(again.deadline > first.deadline);
    const after = await a.current(name);
    assert.ok(before && after && after.expiresInMs > before.expiresInMs + 3000, 're-entry did not extend the expiry');
    // Re-entry is judged on the database: once expired, the same holder starts a new tenure.
    const short = await a.tryAcquire({ name, holder: 'A', ttlMs: 200 });
    assert.equal(short?.token, first.token);
    await sleep(400); // past the TTL
    const next = await a.tryAcquire({ name, holder: 'A', ttlMs: 5000 });
    assert.ok(next);
    assert.equal(next.token, first.token + 1n, 'a re-acquire after expiry is a new tenure');
    await a.release(next);
  });

  it('an expired lease that nobody took cannot be released, and renew reports who holds it', async () => {
    const [a, b] = [open(), open()];
    const name = uniqueName();
    const lease = await a.tryAcquire({ name, holder: 'A', ttlMs: 200 });
    assert.ok(lease);
    await sleep(400); // past the TTL
    await assert.rejects(a.release(lease), { name: 'NotHolderError' });
    const other = await b.tryAcquire({ name, holder: 'B', ttlMs: 5000 });
    assert.ok(other);
    await assert.rejects(
      a.renew(lease),
      (err: Error) => err instanceof LeaseLostError && /held by "B"/.test(err.message),
    );
    await b.release(other);
  });

  it('ensureTokenAbove raises the counter of a new or released lease, never lowers it, keeps a holder', async () => {
    const a = open();
    const fresh = uniqueName();
    await a.ensureTokenAbove(fresh, 41n);
    assert.equal(await a.current(fresh), null, 'a floor does not create a holder');
    const t1 = await a.tryAcquire({ name: fresh, holder: 'A', ttlMs: 5000 });
    assert.equal(t1?.token, 42n);
    await a.ensureTokenAbove(fresh, 5n); // lower: no effect
    await a.ensureTokenAbove(fresh, 42n); // equal: no effect on the live holder
    assert.equal((await a.current(fresh))?.token, 42n);
    assert.equal((await a.current(fresh))?.holder, 'A');
    await a.release(t1);
    await a.ensureTokenAbove(fresh, 100n);
    const t2 = await a.tryAcquire({ name: fresh, holder: 'B', ttlMs: 5000 });
    assert.equal(t2?.token, 101n);
    await a.release(t2);
    await assert.rejects(a.ensureTokenAbove(fresh, -1n), InvalidArgumentError);
  });

  it('works on a pool owned by the caller and leaves it open', async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 2, connectionTimeoutMillis: 2000 });
    try {
      const [a, b] = [new PostgresLeaseBackend({ pool }), new PostgresLeaseBackend({ pool })];
      const name = uniqueName();
      const held = await a.tryAcquire({ name, holder: 'A', ttlMs: 20_000 });
      assert.ok(held);
      const waiting = b.acquire({ name, holder: 'B', ttlMs: 5000 }, AbortSignal.timeout(5000));
      await sleep(100);
      await a.release(held);
      const got = await waiting; // woken by NOTIFY on the dedicated LISTEN client, well before 20 s
      assert.ok(got.token > held.token);
      await b.release(got);
      await a.close();
      await b.close();
      await b.close(); // idempotent
      const { rows } = await pool.query('SELECT 1 AS one');
      assert.equal(rows[0].one, 1, 'closing the backend must not end the caller’s pool');
      await assert.rejects(a.current(name), BackendUnavailableError, 'a closed backend refuses calls');
    } finally {
      await pool.end();
    }
  });

  it('a database without the migrations is a configuration error; an unreachable one is unavailable', async () => {
    const bare = await createTestDatabase({ migrate: false });
    const dead = new PostgresLeaseBackend({
      connectionString: 'postgres://postgres@127.0.0.1:1/none',
      statementTimeoutMs: 1000,
    });
    const unmigrated = new PostgresLeaseBackend({ connectionString: bare.url });
    try {
      await assert.rejects(unmigrated.current('x'), InvalidConfigError);
      await assert.rejects(dead.tryAcquire({ name: 'x', holder: 'a', ttlMs: 1000 }), BackendUnavailableError);
      await assert.rejects(
        dead.onChange('x', () => {}),
        BackendUnavailableError,
      );
    } finally {
      await unmigrated.close();
      await dead.close();
      await bare.drop();
    }
  });
});
