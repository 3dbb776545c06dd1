/**
 * The lease conformance suite: every backend runs these tests unchanged, against a real server.
 * A backend file calls `leaseConformance(...)` with a way to open a new client (one per simulated
 * replica). Lease names are unique per test, so tests never see each other's state.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Lease, LeaseBackend } from '../../src/locks/lease.js';
import { AbortedError, InvalidArgumentError, LeaseLostError, NotHolderError } from '../../src/errors.js';

/** Rounds of the 20-contender exclusion test: 200 grants per backend. */
const ROUNDS = 10;

export interface ConformanceTarget {
  /** Start servers, create schemas… Runs once before the suite. */
  setup?: () => Promise<void>;
  /** A new, independent client against the same backend, as another replica would have. */
  connect: () => Promise<LeaseBackend>;
  teardown?: () => Promise<void>;
  /** The shortest TTL the backend honours (etcd grants whole seconds). */
  shortTtlMs?: number;
}

export function leaseConformance(label: string, target: ConformanceTarget): void {
  describe(`lease conformance: ${label}`, () => {
    const opened: LeaseBackend[] = [];
    const connect = async () => {
      const b = await target.connect();
      opened.push(b);
      return b;
    };
    const ttl = target.shortTtlMs ?? 1000;
    const uniqueName = () => `conf-${randomUUID().slice(0, 8)}`;

    before(async () => {
      await target.setup?.();
    });
    after(async () => {
      await Promise.all(opened.map((b) => b.close()));
      await target.teardown?.();
    });

    it('refuses bad input up front', async () => {
      const b = await connect();
      await assert.rejects(b.tryAcquire({ name: '', holder: 'a', ttlMs: 5000 }), InvalidArgumentError);
      await assert.rejects(b.tryAcquire({ name: 'x', holder: 'a', ttlMs: 0 }), InvalidArgumentError);
      await assert.rejects(b.tryAcquire({ name: 'x', holder: 'a', ttlMs: 10 ** 12 }), InvalidArgumentError);
      await assert.rejects(
        b.tryAcquire({ name: 'x', holder: 'a', ttlMs: 5000, safetyMarginMs: 5000 }),
        InvalidArgumentError,
      );
      await assert.rejects(b.tryAcquire({ name: 'x', holder: '', ttlMs: 5000 }), InvalidArgumentError);
    });

    it('grants to one, refuses a second, reports the holder, and re-enters for the holder', async () => {
      const [a, b] = [await connect(), await connect()];
      const name = uniqueName();
      const sentAt = performance.now();
      const lease = await a.tryAcquire({ name, holder: 'A', ttlMs: 10_000, safetyMarginMs: 1000 });
      assert.ok(lease, 'first tryAcquire must succeed');
      assert.equal(lease.holder, 'A');
      assert.equal(typeof lease.token, 'bigint');
      assert.ok(
        lease.deadline >= sentAt + 9000 && lease.deadline <= performance.now() + 9000,
        'deadline = sent + ttl - margin',
      );
      assert.equal(await b.tryAcquire({ name, holder: 'B', ttlMs: 10_000 }), null);
      const record = await b.current(name);
      assert.ok(record);
      assert.equal(record.holder, 'A');
      assert.equal(record.token, lease.token);
      assert.ok(record.expiresInMs > 0 && record.expiresInMs <= 10_000, `expiresInMs ${record.expiresInMs}`);
      const again = await a.tryAcquire({ name, holder: 'A', ttlMs: 10_000 });
      assert.ok(again, 're-entry by the holder must succeed');
      assert.equal(again.token, lease.token, 're-entry keeps the token');
      await a.release(again);
      assert.equal(await b.current(name), null);
    });

    it('mutual exclusion with 20 contenders over many rounds; tokens strictly increase', async () => {
      const clients = await Promise.all(Array.from({ length: 20 }, () => connect()));
      const name = uniqueName();
      let inside = 0;
      let maxInside = 0;
      const tokens: bigint[] = [];
      await Promise.all(
        clients.map(async (client, i) => {
          for (let round = 0; round < ROUNDS; round++) {
            const lease = await client.acquire({ name, holder: `c${i}`, ttlMs: 10_000 });
            inside++;
            maxInside = Math.max(maxInside, inside);
            tokens.push(lease.token);
            await sleep(2);
            inside--;
            await client.release(lease);
          }
        }),
      );
      // 20 clients hold connections (a PostgreSQL pool and LISTEN each): give them back now, not at the end.
      await Promise.all(clients.map((c) => c.close()));
      assert.equal(maxInside, 1, 'two contenders were inside at once');
      assert.equal(tokens.length, 20 * ROUNDS);
      for (let i = 1; i < tokens.length; i++) {
        assert.ok(tokens[i]! > tokens[i - 1]!, `token ${tokens[i]} after ${tokens[i - 1]} is not greater`);
      }
    });

    it('holders that crash (no renew, no release) are followed one by one, each only after the last expired', async () => {
      const clients = await Promise.all(Array.from({ length: 3 }, () => connect()));
      const name = uniqueName();
      const grants: { holder: string; token: bigint; at: number; expiresNoEarlierThan: number }[] = [];
      await Promise.all(
        clients.map(async (client, i) => {
          // Each winner "crashes" at once: it neither renews nor releases, so only expiry frees the lease.
          const lease = await client.acquire({ name, holder: `crash${i}`, ttlMs: ttl });
          grants.push({
            holder: lease.holder,
            token: lease.token,
            at: performance.now(),
            expiresNoEarlierThan: lease.deadline + lease.safetyMarginMs,
          });
        }),
      );
      await Promise.all(clients.map((c) => c.close()));
      assert.equal(grants.length, 3);
      for (let i = 1; i < grants.length; i++) {
        const [prev, next] = [grants[i - 1]!, grants[i]!];
        assert.ok(next.token > prev.token, `token ${next.token} after ${prev.token} is not greater`);
        // The previous lease lives at least ttl from when its request was sent: no grant before that.
        assert.ok(
          next.at >= prev.expiresNoEarlierThan - 20,
          `${next.holder} was granted ${(prev.expiresNoEarlierThan - next.at).toFixed(0)} ms before ${prev.holder}'s lease could expire`,
        );
      }
    });

    it('expiry frees the lease for another holder with a higher token; renew after expiry fails', async () => {
      const [a, b] = [await connect(), await connect()];
      const name = uniqueName();
      const first = await a.tryAcquire({ name, holder: 'A', ttlMs: ttl });
      assert.ok(first);
      assert.equal(await b.tryAcquire({ name, holder: 'B', ttlMs: ttl }), null);
      await sleep(ttl + 1200);
      await assert.rejects(a.renew(first), LeaseLostError, 'renew after expiry must fail');
      const second = await b.tryAcquire({ name, holder: 'B', ttlMs: ttl });
      assert.ok(second, 'lease must be free after its TTL');
      assert.ok(second.token > first.token);
      await assert.rejects(a.renew(first), LeaseLostError);
      await b.release(second);
    });

    it('renew extends the lease and moves the deadline', async () => {
      const a = await connect();
      const name = uniqueName();
      const lease = await a.tryAcquire({ name, holder: 'A', ttlMs: ttl * 2 });
      assert.ok(lease);
      await sleep(ttl);
      const renewed = await a.renew(lease);
      assert.equal(renewed.token, lease.token);
      assert.ok(renewed.deadline > lease.deadline);
      await sleep(ttl + 300);
      // Without the renew the lease would have expired by now (2 ttl + 300 ms after acquire).
      const record = await a.current(name);
      assert.equal(record?.holder, 'A');
      await a.release(renewed);
    });

    it('release or renew by a non-holder is refused and changes nothing', async () => {
      const [a, b] = [await connect(), await connect()];
      const name = uniqueName();
      const lease = await a.tryAcquire({ name, holder: 'A', ttlMs: 10_000 });
      assert.ok(lease);
      const forgedHolder: Lease = { ...lease, holder: 'B' };
      const forgedToken: Lease = { ...lease, token: lease.token + 1000n };
      await assert.rejects(b.release(forgedHolder), NotHolderError);
      await assert.rejects(b.release(forgedToken), NotHolderError);
      await assert.rejects(b.renew(forgedHolder), LeaseLostError);
      await assert.rejects(b.renew(forgedToken), LeaseLostError);
      const record = await b.current(name);
      assert.equal(record?.holder, 'A');
      assert.equal(record?.token, lease.token);
      await a.release(lease);
      await assert.rejects(a.release(lease), NotHolderError, 'a second release is refused');
    });

    it('a waiter is woken by a release in well under the TTL', async () => {
      const [a, b] = [await connect(), await connect()];
      const name = uniqueName();
      const held = await a.tryAcquire({ name, holder: 'A', ttlMs: 20_000 });
      assert.ok(held);
      const waiting = b.acquire({ name, holder: 'B', ttlMs: 20_000 });
      await sleep(300);
      const releasedAt = performance.now();
      await a.release(held);
      const got = await waiting;
      const wokeAfter = performance.now() - releasedAt;
      assert.equal(got.holder, 'B');
      assert.ok(got.token > held.token);
      assert.ok(wokeAfter < 2000, `waiter took ${wokeAfter.toFixed(0)} ms after release (TTL 20 s)`);
      await b.release(got);
    });

    it('an aborted acquire rejects with AbortedError and leaves the lease alone', async () => {
      const [a, b] = [await connect(), await connect()];
      const name = uniqueName();
      const held = await a.tryAcquire({ name, holder: 'A', ttlMs: 20_000 });
      assert.ok(held);
      const controller = new AbortController();
      const waiting = b.acquire({ name, holder: 'B', ttlMs: 20_000 }, controller.signal);
      await sleep(100);
      controller.abort();
      await assert.rejects(waiting, AbortedError);
      assert.equal((await a.current(name))?.holder, 'A');
      await a.release(held);
      // The aborted waiter must not hold anything behind our back.
      const next = await a.tryAcquire({ name, holder: 'A2', ttlMs: 5000 });
      assert.ok(next, 'aborted waiter left a claim behind');
      await a.release(next);
    });

    it('tokens keep increasing across release and re-acquire, and respect a floor', async () => {
      const a = await connect();
      const name = uniqueName();
      const t1 = await a.tryAcquire({ name, holder: 'A', ttlMs: 5000 });
      assert.ok(t1);
      await a.release(t1);
      const t2 = await a.tryAcquire({ name, holder: 'A', ttlMs: 5000 });
      assert.ok(t2);
      assert.ok(t2.token > t1.token, 'a new tenure of the same holder gets a new token');
      await a.release(t2);
      // A floor at or below what was already granted is always accepted.
      await a.ensureTokenAbove(name, t2.token);
      const t3 = await a.tryAcquire({ name, holder: 'B', ttlMs: 5000 });
      assert.ok(t3);
      assert.ok(t3.token > t2.token);
      await a.release(t3);
    });

    it('onChange notifies on acquire and release', async () => {
      const [a, b] = [await connect(), await connect()];
      const name = uniqueName();
      let events = 0;
      const unsubscribe = await b.onChange(name, () => events++);
      const lease = await a.tryAcquire({ name, holder: 'A', ttlMs: 5000 });
      assert.ok(lease);
      await a.release(lease);
      const deadline = Date.now() + 2000;
      while (events < 1 && Date.now() < deadline) await sleep(20);
      await unsubscribe();
      assert.ok(events >= 1, 'no change notification arrived');
    });
  });
}
