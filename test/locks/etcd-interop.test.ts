/**
 * Our etcd key layout is etcd's own election recipe, so etcd's tools see our leader:
 * `etcdctl elect --listen NAME` prints the leader key and our holder id; and a candidate created
 * by `etcdctl elect NAME proposal` holds the lease against us.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { EtcdLeaseBackend } from '../../src/locks/etcd.js';
import { startEtcd } from '../support/etcd-server.js';

const children: ChildProcess[] = [];

function etcdctl(endpoints: string[], args: string[]) {
  const child = spawn('etcdctl', [`--endpoints=${endpoints.join(',')}`, ...args], {
    env: { ...process.env, ETCDCTL_API: '3' },
  });
  children.push(child);
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  return { child, output: () => out };
}

async function stopAll(): Promise<void> {
  await Promise.all(
    children.map(async (child) => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    }),
  );
}

it(
  'etcdctl elect --listen sees the replica holding our lease, and our backend respects etcdctl candidates',
  { timeout: 60_000 },
  async () => {
    const etcd = await startEtcd();
    const backend = new EtcdLeaseBackend({ endpoints: etcd.endpoints });
    const name = `cronwarden/interop-${randomUUID().slice(0, 6)}/scheduler`;
    try {
      const lease = await backend.tryAcquire({ name, holder: 'replica-7', ttlMs: 10_000 });
      assert.ok(lease);
      const listen = etcdctl(etcd.endpoints, ['elect', '--listen', name]);
      const deadline = Date.now() + 10_000;
      while (!listen.output().includes('replica-7') && Date.now() < deadline) await sleep(100);
      listen.child.kill();
      assert.match(
        listen.output(),
        new RegExp(`${name}/[0-9a-f]+\\s+replica-7`),
        `etcdctl printed: ${listen.output()}`,
      );
      await backend.release(lease);

      const campaigner = etcdctl(etcd.endpoints, ['elect', name, 'from-etcdctl']);
      const until = Date.now() + 10_000;
      while ((await backend.current(name))?.holder !== 'from-etcdctl' && Date.now() < until) await sleep(100);
      assert.equal((await backend.current(name))?.holder, 'from-etcdctl');
      assert.equal(
        await backend.tryAcquire({ name, holder: 'replica-7', ttlMs: 10_000 }),
        null,
        'an etcdctl leader blocks us',
      );
      campaigner.child.kill('SIGINT'); // etcdctl resigns on interrupt
      const waited = await backend.acquire({ name, holder: 'replica-7', ttlMs: 10_000 });
      assert.equal(waited.holder, 'replica-7');
      await backend.release(waited);
    } finally {
      await stopAll();
      await backend.close();
      await etcd.cleanup();
    }
  },
);
