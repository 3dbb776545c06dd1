import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { EtcdLeaseBackend } from '../../src/locks/etcd.js';
import { withLock } from '../../src/locks/with-lock.js';
import type { Lease } from '../../src/locks/lease.js';
import { BackendUnavailableError, LeaseLostError } from '../../src/errors.js';
import { startEtcd, startEtcdCluster } from '../support/etcd-server.js';
import { EventedChild } from '../support/evented-child.js';

const holderFixture = fileURLToPath(new URL('../fixtures/lease-holder.ts', import.meta.url));
const backendModule = fileURLToPath(new URL('../../src/locks/etcd.ts', import.meta.url));
const name = () => `fault-${randomUUID().slice(0, 6)}`;

describe('etcd backend under faults (throwaway etcd)', () => {
  it(
    'a holder paused past its TTL loses the lease; another takes it with a higher token; after SIGCONT the holder reports lost',
    { timeout: 60_000 },
    async () => {
      const etcd = await startEtcd();
      const lease = name();
      const child = EventedChild.fixture('holder', holderFixture, {
        module: backendModule,
        export: 'EtcdLeaseBackend',
        options: { endpoints: etcd.endpoints },
        name: lease,
        holder: 'paused',
        ttlMs: 1000,
        renewEveryMs: 300,
      });
      const other = new EtcdLeaseBackend({ endpoints: etcd.endpoints });
      try {
        const acquired = await child.waitFor((e) => e.event === 'acquired', 20_000);
        assert.equal((await other.current(lease))?.holder, 'paused');
        child.signal('SIGSTOP');
        // Waits (on the paused holder's key) until etcd expires the holder's 1 s lease.
        const taken = await other.acquire({ name: lease, holder: 'other', ttlMs: 10_000 });
        assert.ok(
          taken.token > BigInt(acquired.token as string),
          `token ${taken.token} after ${String(acquired.token)}`,
        );
        child.signal('SIGCONT');
        const lost = await child.waitFor((e) => e.event === 'lost', 15_000);
        assert.equal(lost.name, 'LeaseLostError');
        assert.equal((await other.current(lease))?.holder, 'other');
        await other.release(taken);
      } finally {
        child.signal('SIGCONT');
        child.signal('SIGKILL');
        await child.exited;
        await other.close();
        await etcd.cleanup();
      }
    },
  );

  it(
    'three members: the holder keeps its lease and token while any one member (raft leader or the one we talk to) is down',
    { timeout: 120_000 },
    async () => {
      const cluster = await startEtcdCluster(3);
      // The client is given every member and picks one per call: killing each member in turn kills
      // the one it talks to and the raft leader at some point.
      const holder = new EtcdLeaseBackend({ endpoints: cluster.endpoints, requestTimeoutMs: 1000 });
      const rival = new EtcdLeaseBackend({ endpoints: [...cluster.endpoints].reverse(), requestTimeoutMs: 1000 });
      const ttlMs = 3000;
      try {
        const lease = name();
        let held: Lease | null = await holder.tryAcquire({ name: lease, holder: 'h', ttlMs });
        assert.ok(held);
        const token = held.token;
        // Renew every 700 ms; a renew may fail while raft elects a new leader, but one must succeed
        // before the local deadline, as withLock's watchdog would require.
        const renewUntil = async (ms: number) => {
          const end = performance.now() + ms;
          while (performance.now() < end) {
            await sleep(700);
            for (;;) {
              try {
                held = await holder.renew(held!);
                break;
              } catch (err) {
                if (!(err instanceof BackendUnavailableError)) throw err;
                assert.ok(performance.now() < held!.deadline, `no renew succeeded before the deadline: ${err.message}`);
              }
            }
            assert.equal(held.token, token, 'the token must not change');
          }
        };
        for (const member of cluster.members) {
          await member.kill();
          await renewUntil(ttlMs + 1000); // past the TTL: without renewals the lease would be gone
          assert.equal(await rival.tryAcquire({ name: lease, holder: 'r', ttlMs }), null, 'nobody else can take it');
          assert.equal((await rival.current(lease))?.holder, 'h');
          await member.start();
          await renewUntil(700);
        }
        const record = await rival.current(lease);
        assert.equal(record?.holder, 'h');
        assert.equal(record?.token, token);
        await holder.release(held);
        assert.equal(await rival.current(lease), null);
      } finally {
        await holder.close();
        await rival.close();
        await cluster.cleanup();
      }
    },
  );

  it(
    'tokens survive a full restart of etcd (same data dir): the next token is higher than every earlier one',
    { timeout: 60_000 },
    async () => {
      const etcd = await startEtcd();
      try {
        const lease = name();
        let backend = new EtcdLeaseBackend({ endpoints: etcd.endpoints });
        const before = await backend.tryAcquire({ name: lease, holder: 'a', ttlMs: 5000 });
        assert.ok(before);
        await backend.release(before);
        await backend.close();
        await etcd.members[0]!.restart('kill');
        backend = new EtcdLeaseBackend({ endpoints: etcd.endpoints });
        await backend.ensureTokenAbove(lease, before.token); // the restarted store remembers its revision
        const afterRestart = await backend.tryAcquire({ name: lease, holder: 'b', ttlMs: 5000 });
        assert.ok(afterRestart);
        assert.ok(afterRestart.token > before.token, `token ${afterRestart.token} after ${before.token}`);
        await backend.release(afterRestart);
        await backend.close();
      } finally {
        await etcd.cleanup();
      }
    },
  );

  for (const fault of ['paused (SIGSTOP)', 'killed'] as const) {
    it(
      `connection lost, etcd ${fault}: withLock aborts ctx.signal at the local deadline and rejects with LeaseLostError`,
      { timeout: 60_000 },
      async () => {
        const etcd = await startEtcd();
        const server = etcd.members[0]!;
        const backend = new EtcdLeaseBackend({ endpoints: etcd.endpoints, requestTimeoutMs: 300 });
        try {
          const ttlMs = 2000;
          const safetyMarginMs = 200;
          let sectionStart = 0;
          let abortedAt = -1;
          let reason: unknown;
          const start = performance.now();
          const run = withLock(backend, { name: name(), ttlMs, safetyMarginMs }, async (ctx) => {
            sectionStart = performance.now();
            if (fault === 'killed') await server.kill();
            else server.pause();
            await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
            abortedAt = performance.now();
            reason = ctx.signal.reason;
          });
          await assert.rejects(run, LeaseLostError);
          const settledAfter = performance.now() - start;
          assert.ok(reason instanceof LeaseLostError, `ctx.signal aborted with ${String(reason)}`);
          const deadline = ttlMs - safetyMarginMs;
          // The deadline runs from when the acquire was sent: after `start`, before the section began.
          const abortedAfter = abortedAt - sectionStart;
          assert.ok(
            abortedAt - start >= deadline - 50,
            'an unreachable etcd must not be reported as a lost lease early',
          );
          assert.ok(
            abortedAfter >= 0 && abortedAfter <= deadline + 300,
            `aborted ${abortedAfter.toFixed(0)} ms into the section (deadline ${deadline} ms)`,
          );
          assert.ok(
            settledAfter <= deadline + 1500 + (sectionStart - start),
            `withLock settled after ${settledAfter.toFixed(0)} ms`,
          );
          const closeStart = performance.now();
          await backend.close();
          assert.ok(performance.now() - closeStart < 2000, 'close() must not hang on an unreachable etcd');
        } finally {
          server.resume();
          await backend.close();
          await etcd.cleanup();
        }
      },
    );
  }
});
