/**
 * The Redis lease backend through Sentinel (a real group: primary, replica, three redis-sentinel
 * processes): the URL form, a lease taken through it, and the same backend object carrying on
 * after Sentinel promotes the replica, with tokens that go on increasing.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLeaseBackend, parseSentinelUrl } from '../../src/locks/create-backend.js';
import { InvalidConfigError } from '../../src/errors.js';
import { Redis } from 'ioredis';
import { SENTINEL_MASTER, startSentinelGroup, waitForGroup } from '../../src/drill/servers/redis-sentinel.js';

async function ask(port: number, ...args: string[]): Promise<unknown> {
  const c = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1 });
  try {
    return await c.call(args[0]!, ...args.slice(1));
  } finally {
    c.disconnect();
  }
}

/** The primary's port as each Sentinel of the group at `url` names it. */
async function named(url: string): Promise<number[]> {
  return Promise.all(
    parseSentinelUrl(url).sentinels.map(async (s) =>
      Number(((await ask(s.port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', SENTINEL_MASTER)) as string[])[1]),
    ),
  );
}

/** Has the Sentinels fail the primary over by hand (as they do on their own when it answers late). */
async function handFailover(url: string, from: number): Promise<void> {
  await ask(parseSentinelUrl(url).sentinels[0]!.port, 'SENTINEL', 'FAILOVER', SENTINEL_MASTER);
  for (let i = 0; i < 300 && (await named(url)).some((p) => p === from); i++) await sleep(100);
  assert.ok(
    (await named(url)).every((p) => p !== from),
    'the Sentinels moved the primary',
  );
}

describe('redis lease backend through Sentinel', () => {
  it('parses redis-sentinel://host:port,.../name and refuses anything else', () => {
    assert.deepEqual(parseSentinelUrl('redis-sentinel://127.0.0.1:26379,10.0.0.2:26380/my%20master'), {
      sentinels: [
        { host: '127.0.0.1', port: 26379 },
        { host: '10.0.0.2', port: 26380 },
      ],
      name: 'my master',
    });
    for (const bad of [
      'redis-sentinel://127.0.0.1:26379',
      'redis-sentinel://:1/x',
      'redis-sentinel://h:99999/x',
      'redis://h:1/x',
    ]) {
      assert.throws(() => parseSentinelUrl(bad), InvalidConfigError, bad);
    }
  });

  it(
    'takes a lease through Sentinel and, after the primary is killed, keeps granting increasing tokens from the promoted replica',
    { timeout: 90_000 },
    async () => {
      const group = await startSentinelGroup();
      const backend = await createLeaseBackend({ kind: 'redis', url: group.url });
      try {
        const request = { name: 'cronwarden/sentinel-test', holder: 'a', ttlMs: 1000 };
        const first = await backend.tryAcquire(request);
        assert.ok(first, 'the lease was free');
        const { detail, killedAt, killedPort } = await group.failover();
        assert.match(detail, /Sentinel promoted the replica after \d+ ms/);
        assert.ok(killedAt <= Date.now());
        assert.notEqual(group.primary.port, killedPort);
        // The lease may or may not have reached the replica; either way, once it lapses another
        // holder gets it from the new primary, under a higher token.
        const acquireWithin10s = async (holder: string) => {
          for (let i = 0; i < 100; i++) {
            const lease = await backend.tryAcquire({ ...request, holder }).catch(() => null);
            if (lease) return lease;
            await sleep(100);
          }
          return null;
        };
        const second = await acquireWithin10s('b');
        assert.ok(second, 'a lease was granted through the promoted replica');
        assert.ok(second.token > first.token, `token ${second.token} after ${first.token}`);
        assert.equal((await backend.current(request.name))?.holder, 'b');
        // A second failover waits for the replica (the old primary, back empty) to be in sync and
        // promotes it: the group fails over as often as the drill asks. Which node that is depends
        // on whether the Sentinels failed over on their own in between (a loaded primary can look
        // down to them): the kill strikes the primary they name, so compare with that.
        const again = await group.failover();
        assert.match(again.detail, /Sentinel promoted the replica after \d+ ms/);
        assert.notEqual(group.primary.port, again.killedPort);
        const third = await acquireWithin10s('c');
        assert.ok(third, 'a lease was granted after the second failover');
        assert.ok(third.token > second.token, `token ${third.token} after ${second.token}`);
      } finally {
        await backend.close();
        await group.cleanup();
      }
    },
  );

  it(
    'after the Sentinels failed over on their own (a loaded primary looked down), a failover kills the primary they name',
    { timeout: 120_000 },
    async () => {
      const group = await startSentinelGroup();
      try {
        const first = group.primary.port;
        await handFailover(group.url, first);
        await group.failover();
        assert.equal(group.primary.port, first, 'the node the Sentinels had demoted is the primary again');
        assert.deepEqual(await named(group.url), [first, first, first]);
      } finally {
        await group.cleanup();
      }
    },
  );

  it(
    'waiting for the group reads the roles again: after the Sentinels failed over (as they may during set-up), it accepts the swapped roles, and a restart strikes the new primary',
    { timeout: 120_000 },
    async () => {
      const group = await startSentinelGroup();
      try {
        const stale = { primary: group.primary, replica: group.replica };
        await handFailover(group.url, stale.primary.port);
        const sentinelPorts = parseSentinelUrl(group.url).sentinels.map((s) => s.port);
        const roles = await waitForGroup(sentinelPorts, stale);
        assert.equal(roles.primary, stale.replica, 'the node the Sentinels promoted is the primary');
        assert.equal(roles.replica, stale.primary, 'the demoted node is its replica, online and in sync');
        // The drill's restart fault strikes the primary they name too, not the one recorded at set-up.
        const promotedPid = stale.replica.server.pid;
        const demotedPid = stale.primary.server.pid;
        await group.restartPrimary();
        assert.equal(group.primary, stale.replica);
        assert.notEqual(stale.replica.server.pid, promotedPid, 'the promoted node was restarted');
        assert.equal(stale.primary.server.pid, demotedPid, 'the demoted node was left alone');
      } finally {
        await group.cleanup();
      }
    },
  );
});
