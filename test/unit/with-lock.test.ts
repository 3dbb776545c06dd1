import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ManualClock } from '../support/manual-clock.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { withLock } from '../../src/locks/with-lock.js';
import { InvalidArgumentError, LeaseLostError } from '../../src/errors.js';
import type { Lease } from '../../src/locks/lease.js';

function setup() {
  const clock = new ManualClock();
  const store = new MemoryLeaseStore(clock);
  return { clock, store, backend: new MemoryLeaseBackend({ store }) };
}

describe('withLock', () => {
  it('hands fn the token, keeps the lease renewed past its TTL, and releases on return', async () => {
    const { clock, backend } = setup();
    let seen: bigint | undefined;
    const done = withLock(backend, { name: 'l', holder: 'me', ttlMs: 1000, clock }, async (ctx) => {
      seen = ctx.token;
      await clock.sleep(5000); // five TTLs
      assert.equal(ctx.signal.aborted, false, 'the watchdog kept the lease');
      return 'result';
    });
    await clock.advance(6000);
    assert.equal(await done, 'result');
    assert.equal(seen, 1n);
    assert.equal(await backend.current('l'), null, 'released after fn returned');
  });

  it('releases when fn throws, and rethrows', async () => {
    const { clock, backend } = setup();
    await assert.rejects(
      withLock(backend, { name: 'l', ttlMs: 1000, clock }, async () => {
        throw new Error('boom');
      }),
      /boom/,
    );
    assert.equal(await backend.current('l'), null);
  });

  it('wait:false returns undefined at once when the lock is held', async () => {
    const { clock, backend } = setup();
    await backend.tryAcquire({ name: 'l', holder: 'other', ttlMs: 10_000 });
    let ran = false;
    const r = await withLock(backend, { name: 'l', ttlMs: 1000, wait: false, clock }, async () => {
      ran = true;
    });
    assert.equal(r, undefined);
    assert.equal(ran, false);
  });

  it('a renew that hangs aborts the signal at the local deadline and rejects with LeaseLostError', async () => {
    const { clock, store } = setup();
    class Hanging extends MemoryLeaseBackend {
      override renew(): Promise<Lease> {
        return new Promise(() => {});
      }
    }
    const backend = new Hanging({ store });
    let abortedAt: number | undefined;
    const done = withLock(backend, { name: 'l', ttlMs: 1000, safetyMarginMs: 100, clock }, async (ctx) => {
      await new Promise<void>((resolve) =>
        ctx.signal.addEventListener('abort', () => {
          abortedAt = clock.monotonic();
          resolve();
        }),
      );
    });
    const settled = done.then(
      () => 'resolved',
      (err: Error) => err,
    );
    await clock.advance(2000);
    const outcome = await settled;
    assert.ok(outcome instanceof LeaseLostError, `expected LeaseLostError, got ${String(outcome)}`);
    assert.equal(abortedAt, 900, 'aborted exactly at sent + ttl - margin');
  });

  it('refuses a renew interval that cannot keep the lease', async () => {
    const { clock, backend } = setup();
    await assert.rejects(
      withLock(backend, { name: 'l', ttlMs: 1000, safetyMarginMs: 100, renewEveryMs: 950, clock }, async () => {}),
      InvalidArgumentError,
    );
    assert.equal(await backend.current('l'), null, 'the lease taken for the check is given back');
  });
});
