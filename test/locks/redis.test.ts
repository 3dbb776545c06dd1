import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { leaseConformance } from './conformance.js';
import { RedisLeaseBackend } from '../../src/locks/redis.js';
import { BackendUnavailableError } from '../../src/errors.js';
import { startRedis, type TestRedis } from '../support/redis-server.js';
import { freePort } from '../support/free-port.js';

let conformanceServer: TestRedis | undefined;
leaseConformance('redis', {
  setup: async () => {
    conformanceServer = await startRedis();
  },
  connect: async () => new RedisLeaseBackend({ url: conformanceServer!.url }),
  teardown: async () => conformanceServer?.cleanup(),
});

const unique = (prefix: string) => `${prefix}-${randomUUID().slice(0, 8)}`;

/** Resolves on the next call of the returned listener; rejects if none comes within ms. */
function nextCall(ms = 2000): { listener: () => void; called: Promise<void> } {
  let listener!: () => void;
  const called = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no notification within ${ms} ms`)), ms);
    listener = () => {
      clearTimeout(timer);
      resolve();
    };
  });
  return { listener, called };
}

/** Poll a read-only probe until it holds (for server-side effects no event announces). */
async function eventually(probe: () => Promise<boolean>, what: string, ms = 3000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await probe())) {
    if (performance.now() > deadline) assert.fail(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('redis backend specifics (throwaway redis-server)', () => {
  let server: TestRedis;
  let admin: Redis;
  const backends: RedisLeaseBackend[] = [];
  const open = (options: Partial<ConstructorParameters<typeof RedisLeaseBackend>[0]> = {}) => {
    const b = new RedisLeaseBackend({ url: server.url, ...options });
    backends.push(b);
    return b;
  };

  before(async () => {
    server = await startRedis();
    admin = new Redis(server.url);
  });
  after(async () => {
    await Promise.all(backends.map((b) => b.close()));
    admin.disconnect();
    await server.cleanup();
  });

  it('an acquire that timed out but ran on the server is re-entered with the same token', async () => {
    const b = open({ commandTimeoutMs: 300 });
    const name = unique('reentry');
    assert.equal(await b.current(name), null); // connected before the pause
    server.pause();
    try {
      const startedAt = performance.now();
      await assert.rejects(b.tryAcquire({ name, holder: 'A', ttlMs: 10_000 }), BackendUnavailableError);
      const waited = performance.now() - startedAt;
      assert.ok(waited < 1000, `the timed-out acquire took ${waited.toFixed(0)} ms (timeout 300 ms)`);
    } finally {
      server.resume();
    }
    // The command sat in the socket and ran on resume: A holds the lease without knowing its token.
    const record = await b.current(name);
    assert.equal(record?.holder, 'A', 'the timed-out acquire must have run on the server');
    const retry = await b.tryAcquire({ name, holder: 'A', ttlMs: 10_000 });
    assert.ok(retry);
    assert.equal(retry.token, record.token, 'the retry re-enters the same tenure');
    assert.equal(await open().tryAcquire({ name, holder: 'B', ttlMs: 10_000 }), null);
    await b.release(retry);
    const next = await b.tryAcquire({ name, holder: 'B', ttlMs: 10_000 });
    assert.equal(next?.token, record.token + 1n, 're-entry must not burn a token');
    await b.release(next);
  });

  it('keeps tokens exact as bigint beyond 2^53', async () => {
    const b = open();
    const name = unique('big');
    await b.ensureTokenAbove(name, 2n ** 60n);
    const lease = await b.tryAcquire({ name, holder: 'A', ttlMs: 5000 });
    // 2^60 + 1 is not a double: any trip through a Lua or JS number would round it.
    assert.equal(lease?.token, 2n ** 60n + 1n);
    assert.equal((await b.current(name))?.token, 2n ** 60n + 1n);
    assert.equal((await b.renew(lease)).token, 2n ** 60n + 1n);
    await b.release(lease);
    await b.ensureTokenAbove(name, 2n ** 59n); // a lower floor never lowers the counter
    const next = await b.tryAcquire({ name, holder: 'B', ttlMs: 5000 });
    assert.equal(next?.token, 2n ** 60n + 2n);
    await b.release(next);
  });

  it('names and holders with ":" never collide with another name\'s counter', async () => {
    const b = open();
    const base = unique('colon');
    const withSuffix = await b.tryAcquire({ name: `${base}:token`, holder: 'host:1:A', ttlMs: 5000 });
    assert.ok(withSuffix);
    const plain = await b.tryAcquire({ name: base, holder: 'host:1:B', ttlMs: 5000 });
    assert.ok(plain, "a name whose lease key could be another name's counter must still be grantable");
    assert.equal(plain.token, 1n);
    const record = await b.current(`${base}:token`);
    assert.equal(record?.holder, 'host:1:A');
    assert.equal(record?.token, withSuffix.token);
    await b.release(withSuffix);
    await b.release(plain);
  });

  it('one subscriber connection multiplexes listeners per lease name', async () => {
    const prefix = `${unique('mux')}:`;
    const watcher = open({ keyPrefix: prefix });
    const actor = open({ keyPrefix: prefix });
    const [x, y] = [unique('x'), unique('y')];
    let x1 = 0;
    let x2 = 0;
    let ys = 0;
    const firstX = nextCall();
    const offX1 = await watcher.onChange(x, () => {
      x1++;
      firstX.listener();
    });
    const offX2 = await watcher.onChange(x, () => x2++);
    const firstY = nextCall();
    const offY = await watcher.onChange(y, () => {
      ys++;
      firstY.listener();
    });
    const channels = (await admin.call('PUBSUB', 'CHANNELS', `${prefix}*`)) as string[];
    assert.equal(channels.length, 2, `one channel per name, got ${JSON.stringify(channels)}`);
    const numsub = (await admin.call('PUBSUB', 'NUMSUB', ...channels)) as unknown[];
    assert.deepEqual([numsub[1], numsub[3]], [1, 1], 'two listeners on x share one subscription');

    const lease = await actor.tryAcquire({ name: x, holder: 'A', ttlMs: 5000 });
    await actor.release(lease!);
    await firstX.called;
    await actor.tryAcquire({ name: y, holder: 'A', ttlMs: 5000 }).then((l) => actor.release(l!));
    await firstY.called;
    // Messages reach one connection in publish order: both of x's arrived before y's first one.
    assert.equal(x1, 2, 'acquire and release of x each notify');
    assert.equal(x2, 2);
    assert.ok(ys >= 1 && ys <= 2, `y's listener saw only y's changes (${ys})`);

    await offX1();
    await offX2();
    await offY();
    await eventually(
      async () => ((await admin.call('PUBSUB', 'CHANNELS', `${prefix}*`)) as string[]).length === 0,
      'UNSUBSCRIBE after the last listener',
    );
  });

  it('close() wakes a waiting acquire, which fails instead of sleeping out the TTL', async () => {
    const [a, b] = [open(), open()];
    const name = unique('close-wait');
    const held = await a.tryAcquire({ name, holder: 'A', ttlMs: 20_000 });
    assert.ok(held);
    // Know when the waiter has read the holder (its last step before sleeping): wrap the public read.
    const readHolder = nextCall();
    const read = b.current.bind(b);
    b.current = async (n) => {
      const record = await read(n);
      readHolder.listener();
      return record;
    };
    const waiting = b.acquire({ name, holder: 'B', ttlMs: 20_000 });
    const failed = assert.rejects(waiting, BackendUnavailableError);
    await readHolder.called;
    await new Promise((r) => setImmediate(r)); // let the waiter go to sleep
    const closedAt = performance.now();
    await b.close();
    await failed;
    const took = performance.now() - closedAt;
    assert.ok(took < 1000, `waiter noticed close after ${took.toFixed(0)} ms (TTL 20 s)`);
    await b.close(); // idempotent
    assert.equal((await a.current(name))?.holder, 'A');
    await a.release(held);
  });

  it('close() closes only the connections the backend opened', async () => {
    const own = await startRedis(); // a server of its own: nothing else connects, so counts are exact
    const ownAdmin = new Redis(own.url);
    const given = new Redis(own.url);
    const clients = () => ownAdmin.call('CLIENT', 'LIST').then((list) => (list as string).trim().split('\n').length);
    try {
      await given.ping();
      assert.equal(await clients(), 2, 'admin and the given client');
      const mine = new RedisLeaseBackend({ url: own.url });
      backends.push(mine);
      await mine.current(unique('own'));
      await (
        await mine.onChange(unique('own'), () => undefined)
      )();
      assert.equal(await clients(), 4, 'plus a command connection and one subscriber');
      await mine.close();
      await eventually(async () => (await clients()) === 2, 'both connections of the backend closed');

      const borrowed = new RedisLeaseBackend({ redis: given });
      backends.push(borrowed);
      const name = unique('borrowed');
      const lease = await borrowed.tryAcquire({ name, holder: 'A', ttlMs: 5000 });
      assert.ok(lease);
      assert.equal(await ownAdmin.exists(`cronwarden:lease:${name}`), 1, 'written through the given client');
      await (
        await borrowed.onChange(name, () => undefined)
      )();
      assert.equal(await clients(), 3, 'the given client plus our subscriber');
      await borrowed.close();
      await borrowed.close();
      assert.equal(await given.ping(), 'PONG', 'a client given to us stays open');
      await assert.rejects(borrowed.current(name), BackendUnavailableError);
      await eventually(async () => (await clients()) === 2, 'only our subscriber closed');
    } finally {
      given.disconnect();
      ownAdmin.disconnect();
      await own.cleanup();
    }
  });

  it('an unreachable server fails with BackendUnavailableError within the timeout, not a hang', async () => {
    const nobody = await freePort(); // nothing listens there
    const b = new RedisLeaseBackend({ url: `redis://127.0.0.1:${nobody}`, commandTimeoutMs: 400 });
    backends.push(b);
    const startedAt = performance.now();
    await assert.rejects(b.tryAcquire({ name: 'x', holder: 'a', ttlMs: 5000 }), BackendUnavailableError);
    await assert.rejects(
      b.renew({ name: 'x', holder: 'a', token: 1n, ttlMs: 5000, safetyMarginMs: 500, deadline: 0 }),
      BackendUnavailableError,
    );
    const took = performance.now() - startedAt;
    assert.ok(took < 2000, `two calls took ${took.toFixed(0)} ms with a 400 ms timeout`);
  });
});
