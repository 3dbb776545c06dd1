/**
 * Faults against a throwaway PostgreSQL cluster: a holder paused past its TTL, the server restarted
 * (gracefully and with kill -9), and the server lost while withLock holds the lock.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { startPostgresCluster, type PostgresCluster } from '../support/postgres-cluster.js';
import { EventedChild } from '../support/evented-child.js';
import { PostgresLeaseBackend } from '../../src/locks/postgres.js';
import { withLock } from '../../src/locks/with-lock.js';
import { LeaseLostError } from '../../src/errors.js';

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));
const backendModule = fileURLToPath(new URL('../../src/locks/postgres.ts', import.meta.url));
const holderFixture = fileURLToPath(new URL('../fixtures/lease-holder.ts', import.meta.url));

/** What test/fixtures/lease-holder.ts prints. */
type HolderEvent = { event: 'acquired' | 'renewed' | 'lost'; token?: string; error?: string; name?: string };

/** Resolves on the listener's next call; rejects after timeoutMs. */
function changeWatcher() {
  let calls = 0;
  let wake: (() => void) | undefined;
  return {
    listener: () => {
      calls++;
      wake?.();
    },
    get calls() {
      return calls;
    },
    async waitBeyond(count: number, timeoutMs: number, what: string): Promise<void> {
      const giveUp = performance.now() + timeoutMs;
      while (calls <= count) {
        const left = giveUp - performance.now();
        if (left <= 0) throw new Error(`no change notification: ${what}`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, left);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    },
  };
}

describe('postgres lease backend under faults', () => {
  let cluster: PostgresCluster;
  const opened: PostgresLeaseBackend[] = [];
  const open = () => {
    const backend = new PostgresLeaseBackend({ connectionString: cluster.url, statementTimeoutMs: 1000 });
    opened.push(backend);
    return backend;
  };
  const uniqueName = () => `fault-${randomUUID().slice(0, 8)}`;

  before(async () => {
    cluster = await startPostgresCluster();
  });
  after(async () => {
    await Promise.all(opened.map((b) => b.close()));
    await cluster?.cleanup();
  });

  it(
    'a holder paused past its TTL is overtaken by a higher token and learns it lost on waking',
    { timeout: 60_000 },
    async () => {
      const name = uniqueName();
      const ttlMs = 1500;
      const holder = EventedChild.fixture<HolderEvent>(
        'holder',
        holderFixture,
        {
          module: backendModule,
          export: 'PostgresLeaseBackend',
          options: { connectionString: cluster.url, statementTimeoutMs: 1000 },
          name,
          holder: 'paused-child',
          ttlMs,
          renewEveryMs: 300,
        },
        { cwd: repoRoot },
      );
      try {
        const acquired = await holder.next((e) => e.event === 'acquired', 20_000);
        await holder.next((e) => e.event === 'renewed', 5000);
        const childToken = BigInt(acquired.token!);
        const other = open();
        assert.equal(
          await other.tryAcquire({ name, holder: 'B', ttlMs: 10_000 }),
          null,
          'the running child holds the lease',
        );

        holder.child.kill('SIGSTOP');
        await sleep(ttlMs + 700); // past the TTL, counted from the child's last renew
        const taken = await other.tryAcquire({ name, holder: 'B', ttlMs: 10_000 });
        assert.ok(taken, 'the lease of a paused holder must be free after its TTL');
        assert.ok(taken.token > childToken, `token ${taken.token} not above the paused holder's ${childToken}`);

        holder.child.kill('SIGCONT');
        const lost = await holder.next((e) => e.event === 'lost', 10_000);
        assert.equal(lost.name, 'LeaseLostError');
        assert.match(lost.error ?? '', /held by "B"/);
        assert.equal(await holder.exited, 0);
        const record = await other.current(name);
        assert.equal(record?.holder, 'B', 'the woken child must not disturb the new holder');
        assert.equal(record.token, taken.token);
        await other.release(taken);
      } finally {
        holder.child.kill('SIGKILL');
      }
    },
  );

  for (const how of ['stop', 'kill'] as const) {
    it(
      `the lease row, its token counter and LISTEN survive a server ${how === 'stop' ? 'restart' : 'kill -9 and start'}`,
      { timeout: 60_000 },
      async () => {
        const [a, b] = [open(), open()];
        const name = uniqueName();
        const seen: bigint[] = [];
        const t1 = await a.tryAcquire({ name, holder: 'A', ttlMs: 30_000 });
        assert.ok(t1);
        seen.push(t1.token);
        await a.release(t1);
        const t2 = await a.tryAcquire({ name, holder: 'A', ttlMs: 30_000 });
        assert.ok(t2 && t2.token > t1.token);
        seen.push(t2.token);
        const floorName = uniqueName();
        await a.ensureTokenAbove(floorName, 1000n);
        const watcher = changeWatcher();
        const unsubscribe = await b.onChange(name, watcher.listener);

        await cluster.server.restart(how);

        // The listener reconnects on its own and wakes us once (changes while down were not announced).
        await watcher.waitBeyond(0, 10_000, 'LISTEN connection not re-established after the restart');
        const afterReconnect = watcher.calls;
        const record = await a.current(name);
        assert.equal(record?.holder, 'A', 'the live lease must survive the restart');
        assert.equal(record.token, t2.token);
        assert.equal(await b.tryAcquire({ name, holder: 'B', ttlMs: 5000 }), null);
        await a.release(t2); // the pre-restart lease object is still valid
        await watcher.waitBeyond(afterReconnect, 5000, 'release after the restart was not announced');

        const t3 = await b.tryAcquire({ name, holder: 'B', ttlMs: 5000 });
        assert.ok(t3);
        assert.ok(
          seen.every((t) => t3.token > t),
          `token ${t3.token} after restart is not above ${seen.join(', ')}`,
        );
        await b.release(t3);
        const floored = await b.tryAcquire({ name: floorName, holder: 'B', ttlMs: 5000 });
        assert.equal(floored?.token, 1001n, 'the token floor must survive the restart');
        await b.release(floored);
        await unsubscribe();
      },
    );
  }

  for (const fault of ['pause', 'kill'] as const) {
    it(
      `withLock steps down by its local deadline when PostgreSQL is ${fault === 'pause' ? 'paused' : 'killed'}`,
      { timeout: 60_000 },
      async () => {
        const backend = open();
        const name = uniqueName();
        const ttlMs = 1500;
        const safetyMarginMs = 150;
        const slackMs = 300;
        let token: bigint | undefined;
        let faultAt = 0;
        let abortedAt = 0;
        let reason: unknown;
        try {
          const locked = withLock(backend, { name, holder: 'W', ttlMs, safetyMarginMs }, async (ctx) => {
            token = ctx.token;
            if (fault === 'pause') cluster.server.pause();
            else await cluster.server.kill();
            faultAt = performance.now();
            await new Promise<void>((resolve, reject) => {
              const timer = setTimeout(() => reject(new Error('ctx.signal did not abort within 3 TTLs')), 3 * ttlMs);
              const done = () => {
                clearTimeout(timer);
                resolve();
              };
              if (ctx.signal.aborted) done();
              else ctx.signal.addEventListener('abort', done, { once: true });
            });
            abortedAt = performance.now();
            reason = ctx.signal.reason;
            return 'finished';
          });
          await assert.rejects(locked, LeaseLostError);
          assert.ok(reason instanceof LeaseLostError, `abort reason ${String(reason)}`);
          const late = abortedAt - faultAt - (ttlMs - safetyMarginMs);
          assert.ok(
            late <= slackMs,
            `ctx.signal aborted ${late.toFixed(0)} ms after the latest possible local deadline`,
          );
        } finally {
          if (fault === 'pause') cluster.server.resume();
          else await cluster.server.start();
        }

        const next = await backend.acquire({ name, holder: 'N', ttlMs: 5000 }, AbortSignal.timeout(15_000));
        assert.ok(
          token !== undefined && next.token > token,
          `token ${next.token} after the fault is not above ${token}`,
        );
        await backend.release(next);
      },
    );
  }
});
