/**
 * The Redis backend under faults, each against a throwaway redis-server of its own (never the
 * machine's shared Redis): a holder paused past its TTL, restarts with and without persistence,
 * and the server dying or freezing under withLock.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { RedisLeaseBackend } from '../../src/locks/redis.js';
import { withLock } from '../../src/locks/with-lock.js';
import { LeaseLostError } from '../../src/errors.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { EventedChild } from '../support/evented-child.js';

const holderFixture = fileURLToPath(new URL('../fixtures/lease-holder.ts', import.meta.url));
const backendModule = fileURLToPath(new URL('../../src/locks/redis.ts', import.meta.url));
const unique = (prefix: string) => `${prefix}-${randomUUID().slice(0, 8)}`;

describe('redis backend under faults (throwaway redis-servers)', () => {
  const servers: TestRedis[] = [];
  const backends: RedisLeaseBackend[] = [];
  const start = async (options?: { appendonly?: boolean }) => {
    const s = await startRedis(options);
    servers.push(s);
    return s;
  };
  const open = (url: string, commandTimeoutMs?: number) => {
    const b = new RedisLeaseBackend({ url, commandTimeoutMs });
    backends.push(b);
    return b;
  };
  after(async () => {
    await Promise.all(backends.map((b) => b.close()));
    await Promise.all(servers.map((s) => s.cleanup()));
  });

  it(
    'a holder paused past its TTL loses the lease to a higher token, and its renew fails after SIGCONT',
    { timeout: 30_000 },
    async () => {
      const redis = await start();
      const name = unique('paused');
      const ttlMs = 1000;
      const holder = EventedChild.fixture<Record<string, string>>('holder', holderFixture, {
        module: backendModule,
        export: 'RedisLeaseBackend',
        options: { url: redis.url },
        name,
        holder: 'paused-holder',
        ttlMs,
        renewEveryMs: 300,
      });
      try {
        const acquired = await holder.waitFor((e) => e.event === 'acquired', 15_000);
        const pausedToken = BigInt(acquired.token!);
        holder.child.kill('SIGSTOP');
        const stoppedAt = performance.now();
        const other = open(redis.url);
        // Nothing is published when a lease expires: this waiter wakes at the holder's PTTL.
        const taken = await other.acquire({ name, holder: 'other', ttlMs: 10_000 });
        const tookOverAfter = performance.now() - stoppedAt;
        assert.ok(taken.token > pausedToken, `new token ${taken.token} must exceed the paused holder's ${pausedToken}`);
        assert.ok(
          tookOverAfter < ttlMs + 1500,
          `takeover ${tookOverAfter.toFixed(0)} ms after the pause (TTL ${ttlMs} ms)`,
        );
        const seen = holder.events.length;
        holder.child.kill('SIGCONT');
        const lost = await holder.waitFor((e) => e.event === 'lost', 10_000, seen);
        assert.equal(
          lost.name,
          'LeaseLostError',
          `the woken holder must learn it lost the lease: ${JSON.stringify(lost)}`,
        );
        assert.equal(await holder.exited, 0);
        const record = await other.current(name);
        assert.equal(record?.holder, 'other');
        assert.equal(record?.token, taken.token);
        await other.release(taken);
      } finally {
        await holder.kill();
      }
    },
  );

  it(
    'a restart without persistence resets the counter; no token seen is ever granted again',
    { timeout: 30_000 },
    async () => {
      const redis = await start();
      const name = unique('floor');
      const backend = open(redis.url); // the same client across the restart: ioredis reconnects
      let highest = 0n;
      for (let i = 0; i < 5; i++) {
        const lease = await backend.tryAcquire({ name, holder: `h${i}`, ttlMs: 5000 });
        assert.ok(lease);
        highest = lease.token;
        await backend.release(lease);
      }
      assert.equal(highest, 5n);
      await redis.restart('kill');

      // A process that saw nothing gets a token from the reset counter: the test proves nothing otherwise.
      const stranger = open(redis.url);
      const raw = await stranger.tryAcquire({ name, holder: 'probe', ttlMs: 5000 });
      assert.ok(raw);
      assert.ok(raw.token < highest, `after the restart the raw token ${raw.token} must be below ${highest}`);

      // A process that saw the old tokens (a follower that watched the leader) stays above them by itself:
      // it learns the probe's token while refused, and every earlier one from before the restart.
      assert.equal(await backend.tryAcquire({ name, holder: 'follower', ttlMs: 5000 }), null);
      await stranger.release(raw);
      const follower = await backend.tryAcquire({ name, holder: 'follower', ttlMs: 5000 });
      assert.ok(follower);
      assert.ok(
        follower.token > highest,
        `token ${follower.token} must exceed every token this backend saw (${highest})`,
      );
      await backend.release(follower);

      // A process that saw nothing is kept above the old tokens by ensureTokenAbove (the scheduler's ledger floor).
      await redis.restart('kill');
      const fresh = open(redis.url);
      await fresh.ensureTokenAbove(name, follower.token);
      const fenced = await fresh.tryAcquire({ name, holder: 'after', ttlMs: 5000 });
      assert.ok(fenced);
      assert.ok(fenced.token > follower.token, `token ${fenced.token} must exceed the floor (${follower.token})`);
      await fresh.release(fenced);
    },
  );

  it('with AOF persistence the counter survives a kill -9 without any floor', { timeout: 30_000 }, async () => {
    const redis = await start({ appendonly: true });
    const name = unique('aof');
    const backend = open(redis.url);
    let last = 0n;
    for (let i = 0; i < 3; i++) {
      const lease = await backend.tryAcquire({ name, holder: `h${i}`, ttlMs: 5000 });
      assert.ok(lease);
      last = lease.token;
      await backend.release(lease);
    }
    await redis.restart('kill');
    const afterRestart = await backend.tryAcquire({ name, holder: 'after', ttlMs: 5000 });
    assert.ok(afterRestart);
    assert.equal(afterRestart.token, last + 1n, 'the counter continues where it was');
    await backend.release(afterRestart);
  });

  for (const fault of ['killed', 'paused'] as const) {
    it(
      `server ${fault} under withLock: ctx.signal aborts with LeaseLostError by the local deadline, withLock rejects`,
      { timeout: 20_000 },
      async () => {
        const redis = await start();
        const backend = open(redis.url, 300);
        const ttlMs = 1500;
        const safetyMarginMs = 200;
        const deadlineAfter = ttlMs - safetyMarginMs; // from when the acquire was sent
        let enteredAt = 0;
        let abortedAt = 0;
        let reason: unknown;
        const calledAt = performance.now();
        const run = withLock(backend, { name: unique(`lost-${fault}`), ttlMs, safetyMarginMs }, async (ctx) => {
          enteredAt = performance.now();
          if (fault === 'killed') await redis.kill();
          else redis.pause();
          await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
          abortedAt = performance.now();
          reason = ctx.signal.reason;
          return 'finished';
        });
        await assert.rejects(run, LeaseLostError);
        assert.ok(reason instanceof LeaseLostError, `ctx.signal aborted with ${String(reason)}`);
        const slackMs = 250;
        // The acquire was sent between calledAt and enteredAt, so the deadline lies in that window + deadlineAfter.
        assert.ok(
          abortedAt - enteredAt <= deadlineAfter + slackMs,
          `aborted ${(abortedAt - enteredAt).toFixed(0)} ms after entering (deadline ${deadlineAfter} ms)`,
        );
        // Not earlier either: a renew that cannot reach Redis is not a lost lease until the deadline says so.
        assert.ok(
          abortedAt - calledAt >= deadlineAfter - 5,
          `aborted ${(abortedAt - calledAt).toFixed(0)} ms after the call, before the deadline`,
        );
        if (fault === 'paused') redis.resume();
      },
    );
  }
});
