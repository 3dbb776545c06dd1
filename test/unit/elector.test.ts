import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ManualClock } from '../support/manual-clock.js';
import { MemoryLeaseBackend, MemoryLeaseStore } from '../../src/locks/memory.js';
import { Elector, type ElectorRole, type TenureEnd } from '../../src/scheduler/election/elector.js';
import { InvalidConfigError, BackendUnavailableError, LeaseLostError } from '../../src/errors.js';
import type { Lease, LeaseBackend } from '../../src/locks/lease.js';

const timings = { ttlMs: 3000, renewEveryMs: 1000, retryPeriodMs: 500, retryJitterMs: 0, safetyMarginMs: 300 };

function setup() {
  const clock = new ManualClock();
  const store = new MemoryLeaseStore(clock);
  const make = (id: string, backend: LeaseBackend = new MemoryLeaseBackend({ store })) => {
    const roles: ElectorRole[] = [];
    const elector = new Elector(backend, { leaseName: 'sched', replicaId: id, ...timings }, {}, clock);
    elector.on('role:changed', (r) => roles.push(r));
    return { elector, roles };
  };
  return { clock, store, make };
}

/** Elector a leads, b campaigns behind it. */
async function leaderAndFollower() {
  const { clock, make } = setup();
  const a = make('a');
  const b = make('b');
  a.elector.start();
  await clock.advance(1);
  b.elector.start();
  await clock.advance(1);
  return { clock, a, b };
}

/** A backend whose renew can be made to hang forever (a partitioned or paused backend). */
class HangingRenew extends MemoryLeaseBackend {
  hang = false;
  renews = 0;
  override renew(lease: Lease): Promise<Lease> {
    this.renews++;
    return this.hang ? new Promise(() => {}) : super.renew(lease);
  }
}

describe('Elector', () => {
  it('refuses timings where a healthy leader would lapse between renews', () => {
    const backend = new MemoryLeaseBackend();
    assert.throws(
      () =>
        new Elector(backend, { leaseName: 'x', replicaId: 'a', ttlMs: 1000, renewEveryMs: 950, safetyMarginMs: 100 }),
      (err: Error) => err instanceof InvalidConfigError && /renewEveryMs/.test(err.message),
    );
    assert.throws(
      () => new Elector(backend, { leaseName: 'x', replicaId: 'a', ttlMs: 1000, safetyMarginMs: 1000 }),
      (err: Error) => err instanceof InvalidConfigError && /safetyMarginMs/.test(err.message),
    );
    assert.throws(
      () => new Elector(backend, { leaseName: 'x', replicaId: 'a', ttlMs: 1000, retryPeriodMs: 1000 }),
      (err: Error) => err instanceof InvalidConfigError && /retryPeriodMs/.test(err.message),
    );
  });

  it('goes follower → candidate → leader and keeps the lease by renewing', async () => {
    const { clock, make } = setup();
    const a = make('a');
    a.elector.start();
    await clock.advance(1);
    assert.deepEqual(a.roles, ['candidate', 'leader']);
    const token = a.elector.lease()?.token;
    assert.equal(token, 1n);
    await clock.advance(30_000); // ten TTLs: only renewals keep it
    assert.equal(a.elector.role, 'leader');
    assert.equal(a.elector.lease()?.token, token);
    await a.elector.stop();
    assert.equal(a.elector.role, 'stopped');
  });

  it('a graceful stop hands leadership to a follower at once, with a higher token', async () => {
    const { clock, a, b } = await leaderAndFollower();
    assert.equal(a.elector.role, 'leader');
    assert.equal(b.elector.role, 'candidate');
    await a.elector.stop();
    await clock.advance(0);
    assert.equal(b.elector.role, 'leader', 'follower must take over on the release notification, without waiting');
    assert.ok(b.elector.lease()!.token > 1n);
    await b.elector.stop();
  });

  it('a renew that hangs past the deadline: the leader steps down at its local deadline', async () => {
    const { clock, store, make } = setup();
    const backend = new HangingRenew({ store });
    const a = make('a', backend);
    const lost: string[] = [];
    const ends: TenureEnd[] = [];
    a.elector.on('lease:lost', (_l, reason, end) => {
      lost.push(reason);
      ends.push(end);
    });
    a.elector.start();
    await clock.advance(1);
    const lease = a.elector.lease()!;
    backend.hang = true;
    // Deadline = when the acquire was sent + ttl 3000 - margin 300.
    assert.ok(lease.deadline <= 2700);
    await clock.advance(lease.deadline - clock.monotonic() - 1);
    assert.ok(a.elector.lease(), 'still leading just before the deadline');
    assert.equal(a.elector.role, 'leader');
    await clock.advance(2);
    assert.equal(a.elector.lease(), undefined, 'lease() must be gone at the deadline');
    assert.notEqual(a.elector.role, 'leader');
    assert.equal(lost.length, 1);
    assert.match(lost[0]!, /^local deadline/);
    assert.equal(ends[0]!.kind, 'deadline');
    assert.ok(backend.renews >= 1, 'the renew was attempted');
    backend.hang = false;
    await a.elector.stop();
  });

  it('losing the lease to the backend (renew refused) ends the tenure and campaigns again', async () => {
    const { clock, store, make } = setup();
    const a = make('a');
    const ends: [string, TenureEnd][] = [];
    a.elector.on('lease:lost', (_l, reason, end) => ends.push([reason, end]));
    a.elector.start();
    await clock.advance(1);
    // Someone else takes the lease behind a's back (e.g. after a backend failover).
    store.leases.set('sched', { holder: 'intruder', token: 99n, expiresAt: clock.monotonic() + 5000 });
    await clock.advance(1000);
    assert.notEqual(a.elector.role, 'leader');
    const [reason, end] = ends[0]!;
    assert.ok(end.kind === 'lost' && end.error instanceof LeaseLostError, `ended as ${end.kind}`);
    assert.equal(reason, end.error.message);
    assert.equal(store.leases.get('sched')?.holder, 'intruder', 'a lost lease is not released: it is not ours');
    store.leases.delete('sched');
    store.events.emit('sched');
    await clock.advance(600);
    assert.equal(a.elector.role, 'leader');
    assert.ok(a.elector.lease()!.token > 1n);
    await a.elector.stop();
  });

  it('keeps leading through a backend blip shorter than the deadline', async () => {
    const { clock, store, make } = setup();
    class Flaky extends MemoryLeaseBackend {
      failures = 0;
      override async renew(lease: Lease): Promise<Lease> {
        if (this.failures > 0) {
          this.failures--;
          throw new BackendUnavailableError('memory', 'simulated blip');
        }
        return super.renew(lease);
      }
    }
    const backend = new Flaky({ store });
    const a = make('a', backend);
    a.elector.start();
    await clock.advance(1);
    backend.failures = 1;
    await clock.advance(5000);
    assert.equal(a.elector.role, 'leader');
    await a.elector.stop();
  });

  it('resign releases the lease so the follower leads at once', async () => {
    const { clock, a, b } = await leaderAndFollower();
    assert.equal(await a.elector.resign(), true);
    await clock.advance(0);
    assert.equal(b.elector.role, 'leader');
    assert.notEqual(a.elector.role, 'leader');
    assert.equal(await a.elector.resign(), false, 'resign when not leading says so');
    await a.elector.stop();
    await b.elector.stop();
  });

  it('after a resign it leaves the field for a TTL, or for the pause the resign asks (a shard handed back)', async () => {
    const { clock, a, b } = await leaderAndFollower();
    // b resigns a lease nobody else wants: back in the race only after a TTL (3 s).
    await a.elector.stop();
    await clock.advance(0);
    assert.equal(b.elector.role, 'leader');
    await b.elector.resign();
    await clock.advance(2900);
    assert.notEqual(b.elector.role, 'leader', 'still leaving the field 2.9 s after a plain resign');
    await clock.advance(200);
    assert.equal(b.elector.role, 'leader');
    // A hand-back asks for 400 ms: b campaigns again after that, not after a TTL.
    await b.elector.resign(400);
    await clock.advance(300);
    assert.notEqual(b.elector.role, 'leader');
    await clock.advance(200);
    assert.equal(b.elector.role, 'leader', 'back after the pause the resign asked for');
    // The asked pause is for that resign only: the next plain one waits a TTL again.
    await b.elector.resign();
    await clock.advance(500);
    assert.notEqual(b.elector.role, 'leader');
    await b.elector.stop();
  });

  it('says why each tenure ended, as data and as the reason string, and releases only what may still be ours', async () => {
    const { clock, a, b } = await leaderAndFollower();
    const ends: [string, TenureEnd][] = [];
    for (const e of [a.elector, b.elector]) e.on('lease:lost', (_l, reason, end) => ends.push([reason, end]));
    a.elector.stepDown('fence refused token 1: token 2 was already accepted');
    await clock.advance(0);
    assert.deepEqual(ends.shift(), [
      'fence refused token 1: token 2 was already accepted',
      { kind: 'fence', detail: 'fence refused token 1: token 2 was already accepted' },
    ]);
    assert.equal(b.elector.role, 'leader', 'a fenced-out leader releases, so the follower leads at once');
    assert.equal(await b.elector.resign(), true);
    await clock.advance(0);
    assert.deepEqual(ends.shift(), ['resigned', { kind: 'resigned' }]);
    await clock.advance(500); // a, fenced out, campaigns again after its retry period
    assert.equal(a.elector.role, 'leader');
    await a.elector.stop();
    assert.deepEqual(ends.shift(), ['stopped', { kind: 'stopped' }]);
    await b.elector.stop();
    assert.deepEqual(ends, []);
  });

  it('an onStartedLeading that throws ends the tenure, released, with the error kept', async () => {
    const { clock, store } = setup();
    const stopped: [string, TenureEnd][] = [];
    const elector = new Elector(
      new MemoryLeaseBackend({ store }),
      { leaseName: 'sched', replicaId: 'a', ...timings },
      {
        onStartedLeading: () => Promise.reject(new Error('boom')),
        onStoppedLeading: (reason, end) => void stopped.push([reason, end]),
      },
      clock,
    );
    elector.start();
    await clock.advance(1);
    assert.equal(stopped.length, 1);
    const [reason, end] = stopped[0]!;
    assert.equal(reason, 'onStartedLeading failed: boom');
    assert.ok(end.kind === 'callback-failed' && end.error.message === 'boom');
    assert.equal(store.leases.get('sched'), undefined, 'released');
    assert.notEqual(elector.role, 'leader');
    await elector.stop();
  });

  it('retry jitter comes from the injected random source', async () => {
    const clock = new ManualClock();
    let acquires = 0;
    class Down extends MemoryLeaseBackend {
      override acquire(): Promise<Lease> {
        acquires++;
        return Promise.reject(new BackendUnavailableError('memory', 'down'));
      }
    }
    const options = { leaseName: 'sched', replicaId: 'a', ...timings, retryJitterMs: 200 };
    // 500 ms retry period + floor(0.5 × 201) = 600 ms between campaigns.
    const elector = new Elector(new Down({ clock }), options, {}, clock, () => 0.5);
    elector.on('backend:error', () => {});
    elector.start();
    await clock.advance(0);
    assert.equal(acquires, 1);
    await clock.advance(599);
    assert.equal(acquires, 1);
    await clock.advance(1);
    assert.equal(acquires, 2);
    await clock.advance(600);
    assert.equal(acquires, 3);
    await elector.stop();
  });
});
