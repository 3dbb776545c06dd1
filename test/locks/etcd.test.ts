import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Etcd3 } from 'etcd3';
import { leaseConformance } from './conformance.js';
import { EtcdLeaseBackend } from '../../src/locks/etcd.js';
import { AbortedError, InvalidArgumentError } from '../../src/errors.js';
import type { Lease } from '../../src/locks/lease.js';
import { startEtcd, type TestEtcd } from '../support/etcd-server.js';

let server: TestEtcd;
leaseConformance('etcd', {
  setup: async () => {
    server = await startEtcd();
  },
  connect: async () => new EtcdLeaseBackend({ endpoints: server.endpoints }),
  teardown: async () => server.cleanup(),
  shortTtlMs: 1000,
});

/** An etcd client that records what its user watches (public API only, no private fields). */
class RecordingEtcd3 extends Etcd3 {
  readonly watched: string[] = [];
  override watch() {
    const builder = super.watch();
    const key = builder.key.bind(builder);
    const prefix = builder.prefix.bind(builder);
    builder.key = (k) => (this.watched.push(`key ${k.toString()}`), key(k));
    builder.prefix = (p) => (this.watched.push(`prefix ${p.toString()}`), prefix(p));
    return builder;
  }
}

/** Poll a condition (not a sleep that orders events): fails the test if it never holds. */
async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

describe('etcd backend specifics', () => {
  let etcd: TestEtcd;
  let admin: Etcd3;
  const queueKeys = async (name: string) =>
    (await admin.getAll().prefix(`${name}/`).sort('Create', 'Ascend').keys()).map(String);

  before(async () => {
    etcd = await startEtcd();
    admin = new Etcd3({ hosts: etcd.endpoints });
  });
  after(async () => {
    admin.close();
    await etcd.cleanup();
  });

  it('5 waiters acquire in the order they arrived (FIFO)', { timeout: 60_000 }, async () => {
    const name = `fifo-${randomUUID().slice(0, 6)}`;
    const clients = Array.from({ length: 6 }, () => new EtcdLeaseBackend({ endpoints: etcd.endpoints }));
    try {
      const first = await clients[0]!.tryAcquire({ name, holder: 'w0', ttlMs: 10_000 });
      assert.ok(first);
      const order: string[] = [];
      const waits: Promise<void>[] = [];
      // Arrival order is the order in which the waiters' keys appear; interleave holders so that
      // FIFO cannot coincide with name or client order by accident.
      for (const i of [3, 1, 5, 2, 4]) {
        waits.push(
          clients[i]!.acquire({ name, holder: `w${i}`, ttlMs: 10_000 }).then(async (lease) => {
            order.push(lease.holder);
            await clients[i]!.release(lease);
          }),
        );
        const queued = waits.length + 1;
        await until(async () => (await queueKeys(name)).length === queued, `${queued} keys in the queue`);
      }
      await clients[0]!.release(first);
      await Promise.all(waits);
      assert.deepEqual(order, ['w3', 'w1', 'w5', 'w2', 'w4']);
    } finally {
      await Promise.all(clients.map((c) => c.close()));
    }
  });

  it(
    'a waiter watches only its predecessor; when its predecessor leaves the queue it watches the next one up',
    { timeout: 60_000 },
    async () => {
      const name = `pred-${randomUUID().slice(0, 6)}`;
      const holder = new EtcdLeaseBackend({ endpoints: etcd.endpoints });
      const raw = Array.from({ length: 5 }, () => new RecordingEtcd3({ hosts: etcd.endpoints }));
      const waiters = raw.map((client) => new EtcdLeaseBackend({ client }));
      const abortW3 = new AbortController();
      const order: string[] = [];
      const results: Promise<Lease | void>[] = [];
      try {
        const held = await holder.tryAcquire({ name, holder: 'w0', ttlMs: 20_000 });
        assert.ok(held);
        for (let i = 0; i < 5; i++) {
          const signal = i === 2 ? abortW3.signal : undefined;
          const lease = waiters[i]!.acquire({ name, holder: `w${i + 1}`, ttlMs: 20_000 }, signal);
          results.push(
            i === 2
              ? assert.rejects(lease, AbortedError)
              : lease.then(async (l) => {
                  order.push(l.holder);
                  await waiters[i]!.release(l);
                }),
          );
          await until(async () => (await queueKeys(name)).length === i + 2, `${i + 2} keys in the queue`);
        }
        const keys = await queueKeys(name); // k0 (holder), k1..k5 (w1..w5)
        await until(
          () => raw.every((r, i) => r.watched.includes(`key ${keys[i]}`)),
          'every waiter to watch its predecessor',
        );

        abortW3.abort();
        await results[2];
        assert.deepEqual(
          await queueKeys(name),
          [keys[0], keys[1], keys[2], keys[4], keys[5]],
          'the aborted waiter left the queue',
        );
        // w4 lost its predecessor (w3) and must now watch w2; nobody may lead while w0 holds on.
        await until(() => raw[3]!.watched.includes(`key ${keys[2]}`), 'w4 to watch w2');
        assert.equal((await holder.current(name))?.holder, 'w0');
        assert.deepEqual(order, []);

        await holder.release(held);
        await Promise.all(results);
        assert.deepEqual(order, ['w1', 'w2', 'w4', 'w5']);
        const watchedBy = raw.map((r) => [...new Set(r.watched)]);
        assert.deepEqual(watchedBy[0], [`key ${keys[0]}`]);
        assert.deepEqual(watchedBy[1], [`key ${keys[1]}`]);
        assert.deepEqual(watchedBy[3], [`key ${keys[3]}`, `key ${keys[2]}`]);
        assert.deepEqual(
          watchedBy[4],
          [`key ${keys[4]}`],
          'w5 must not react to w3 leaving, nor watch anything but w4',
        );
      } finally {
        abortW3.abort();
        await holder.close();
        await Promise.all(waiters.map((w) => w.close()));
        await Promise.allSettled(results);
        for (const r of raw) r.close();
      }
    },
  );

  it('a lease named "a/b" is not a candidate of lease "a" (the election prefixes nest)', async () => {
    const name = `nest-${randomUUID().slice(0, 6)}`;
    const backend = new EtcdLeaseBackend({ endpoints: etcd.endpoints });
    try {
      const inner = await backend.tryAcquire({ name: `${name}/inner`, holder: 'inner', ttlMs: 5000 });
      assert.ok(inner);
      assert.equal(await backend.current(name), null);
      const outer = await backend.tryAcquire({ name, holder: 'outer', ttlMs: 5000 });
      assert.ok(outer, 'the nested lease must not block the outer one');
      assert.equal((await backend.current(`${name}/inner`))?.holder, 'inner');
      await backend.release(inner);
      await backend.release(outer);
    } finally {
      await backend.close();
    }
  });

  it('ensureTokenAbove refuses a floor above the cluster revision (etcd cannot raise it)', async () => {
    const backend = new EtcdLeaseBackend({ endpoints: etcd.endpoints });
    try {
      const name = `floor-${randomUUID().slice(0, 6)}`;
      const lease = await backend.tryAcquire({ name, holder: 'a', ttlMs: 5000 });
      assert.ok(lease);
      await backend.ensureTokenAbove(name, lease.token);
      await assert.rejects(
        backend.ensureTokenAbove(name, lease.token + 1_000_000n),
        (err) => err instanceof InvalidArgumentError && /etcd data wiped/.test(err.message),
      );
      await backend.release(lease);
    } finally {
      await backend.close();
    }
  });
});
