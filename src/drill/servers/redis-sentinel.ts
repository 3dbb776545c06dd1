/**
 * A throwaway Redis Sentinel group for the drill's redis-sentinel-failover fault: a primary, one
 * replica and three `redis-sentinel` processes (Debian package redis-sentinel), all on free
 * loopback ports, no persistence. failover() kills the primary with SIGKILL and waits until the
 * Sentinels name the replica as the new primary; the old primary comes back as a replica of it.
 *
 * Redis replicates asynchronously: the promoted replica may lack the newest lease writes (and the
 * token counter's newest value), the scenario of the Redlock critique. Nothing in Redis prevents
 * that; the ledger's fence (fires refused under a leader token lower than one already committed)
 * is what the guarantee rests on. `lagMs` widens that window on purpose: the replica is cut off
 * for that long before the kill, so it is promoted missing everything written meanwhile.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { DrillError } from '../../errors.js';
import { freePort } from './free-port.js';
import { ServerProcess, removeDir, scratchDir } from './server-process.js';

export const SENTINEL_MASTER = 'cw';

export interface RedisNode {
  port: number;
  label: string;
  server: ServerProcess;
}

export interface SentinelGroup {
  /** `redis-sentinel://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/cw`: the lease backend's URL. */
  readonly url: string;
  readonly primary: RedisNode;
  readonly replica: RedisNode;
  /**
   * What struck, when the primary was killed (the fault proper; epoch ms), and its port (the
   * primary the Sentinels named then: they may have failed over on their own since the last wait).
   */
  failover(options?: { lagMs?: number }): Promise<{ detail: string; killedAt: number; killedPort: number }>;
  /** Kill and restart the node the Sentinels name as primary now (the drill's `restart` fault). */
  restartPrimary(): Promise<void>;
  cleanup(): Promise<void>;
}

async function command<T>(port: number, ...args: (string | number)[]): Promise<T> {
  const client = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    connectTimeout: 1000,
    retryStrategy: () => null,
  });
  client.on('error', () => {}); // the command's rejection is what we report
  try {
    await client.connect();
    return (await client.call(String(args[0]), ...args.slice(1).map(String))) as T;
  } finally {
    client.disconnect();
  }
}

function redisNode(dir: string, port: number, label: string, replicaOf?: number): RedisNode {
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    '--save',
    '',
    '--appendonly',
    'no',
    '--dbfilename',
    `${label}.rdb`,
    // A replica that comes back empty is synced at once, not after the default 5 s wait for others.
    '--repl-diskless-sync-delay',
    '0',
  ];
  if (replicaOf) args.push('--replicaof', '127.0.0.1', String(replicaOf));
  const server = new ServerProcess(
    { label, command: 'redis-server', args, ready: () => command(port, 'PING').then(() => undefined) },
    dir,
  );
  return { port, label, server };
}

function sentinelNode(dir: string, port: number, primaryPort: number, i: number): ServerProcess {
  const conf = join(dir, `sentinel-${i}.conf`);
  // Sentinel rewrites its own config file: each needs a writable one of its own.
  writeFileSync(
    conf,
    [
      `port ${port}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${SENTINEL_MASTER} 127.0.0.1 ${primaryPort} 2`,
      `sentinel down-after-milliseconds ${SENTINEL_MASTER} 1000`,
      `sentinel failover-timeout ${SENTINEL_MASTER} 5000`,
      '',
    ].join('\n'),
  );
  return new ServerProcess(
    {
      label: `sentinel-${i}`,
      command: 'redis-sentinel',
      args: [conf],
      ready: () => command(port, 'PING').then(() => undefined),
    },
    dir,
  );
}

/** Polls `check`, which names what is still missing (undefined once nothing is), until the timeout. */
async function waitFor(
  what: string,
  check: () => Promise<string | undefined>,
  timeoutMs = 60_000,
  logTail: () => string = () => '',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const missing = await check().catch((err: unknown) => String(err));
    if (missing === undefined) return;
    if (Date.now() > deadline) {
      throw new DrillError(`redis sentinel: ${what} not within ${timeoutMs} ms; last seen: ${missing}\n${logTail()}`);
    }
    await sleep(100);
  }
}

export async function startSentinelGroup(): Promise<SentinelGroup> {
  const dir = scratchDir('redis-sentinel');
  const [p0, p1, ...sentinelPorts] = await Promise.all(Array.from({ length: 5 }, () => freePort()));
  let primary = redisNode(dir, p0!, 'redis-a');
  let replica = redisNode(dir, p1!, 'redis-b', p0);
  const sentinels = sentinelPorts.map((p, i) => sentinelNode(dir, p, p0!, i));
  const all = () => [primary.server, replica.server, ...sentinels];
  try {
    await primary.server.start();
    await replica.server.start();
    await Promise.all(sentinels.map((s) => s.start()));
    ({ primary, replica } = await waitForGroup(sentinelPorts, { primary, replica }));
  } catch (err) {
    for (const s of all()) await s.kill();
    removeDir(dir);
    throw err;
  }
  return {
    url: `redis-sentinel://${sentinelPorts.map((p) => `127.0.0.1:${p}`).join(',')}/${SENTINEL_MASTER}`,
    get primary() {
      return primary;
    },
    get replica() {
      return replica;
    },
    async restartPrimary() {
      // The Sentinels may have failed over on their own since the last wait: strike the primary
      // they name, not the one recorded then (no wait for a replica in sync: this fault needs none).
      ({ primary, replica } = rolesNamed(await namedPrimaries(sentinelPorts), { primary, replica }) ?? {
        primary,
        replica,
      });
      await primary.server.restart('kill');
    },
    async failover(o = {}) {
      // A failover needs a replica in sync that every Sentinel knows (the one before it left the
      // old primary to resync in the background: nothing in the drill needs it until now). The
      // Sentinels may have failed over on their own since: the kill strikes the primary they name.
      ({ primary, replica } = await waitForGroup(sentinelPorts, { primary, replica }));
      // Lag on purpose: an output buffer limit of one byte for replicas makes the primary drop the
      // replica at its next write, and again at every resync, so the replica keeps the state of
      // this moment. (Stopping the replica would not do: the kernel buffers the stream for it.)
      if (o.lagMs) {
        await command(primary.port, 'CONFIG', 'SET', 'client-output-buffer-limit', 'replica 1 1 0');
        await sleep(o.lagMs);
      }
      const killedAt = Date.now();
      const killedPort = primary.port;
      await primary.server.kill();
      const promoted = replica;
      await waitFor(`promotion of 127.0.0.1:${promoted.port}`, async () => {
        const named = await namedPrimaries(sentinelPorts);
        return named.every((p) => p === promoted.port) ? undefined : `the Sentinels name ${named.join(', ')}`;
      });
      const promotedAfter = Date.now() - killedAt;
      // The old primary comes back empty, as a replica of the new one.
      const old = redisNode(dir, primary.port, primary.label, promoted.port);
      await old.server.start();
      primary = promoted;
      replica = old;
      const cutOff = o.lagMs ? ` (its replica cut off ${o.lagMs} ms before)` : '';
      return {
        detail: `kill -9 of the lease's Redis primary${cutOff}; Sentinel promoted the replica after ${promotedAfter} ms`,
        killedAt,
        killedPort,
      };
    },
    async cleanup() {
      for (const s of all()) await s.kill();
      removeDir(dir);
    },
  };
}

/** The two Redis nodes as the Sentinels see them. */
export interface Roles {
  primary: RedisNode;
  replica: RedisNode;
}

/**
 * Waits until the Sentinels agree on one of the two nodes as primary, every one knows the other as
 * an online replica in sync with it, and knows the other Sentinels: a failover can happen. Returns
 * the roles they agree on, which need not be the caller's: they fail over on their own when a
 * loaded primary answers late (even during set-up), so the roles are read again at every poll.
 */
export async function waitForGroup(sentinelPorts: number[], nodes: Roles): Promise<Roles> {
  let roles = nodes;
  await waitFor(
    'the Sentinels to agree on the primary and find its replica and each other',
    async () => {
      const named = await namedPrimaries(sentinelPorts);
      const agreed = rolesNamed(named, nodes);
      if (!agreed) return `the Sentinels name ${named.join(', ')} as primary`;
      roles = agreed;
      const seen: string[] = [];
      for (const port of sentinelPorts) {
        const missing = await replicaMissing(port, roles.replica, sentinelPorts.length - 1);
        if (missing) seen.push(`sentinel :${port}: ${missing}`);
      }
      return seen.length ? seen.join('; ') : undefined;
    },
    60_000,
    () => `${roles.replica.label} log:\n${roles.replica.server.logTail(15)}`,
  );
  return roles;
}

/** The port of the primary each Sentinel names (NaN from one that names none). */
async function namedPrimaries(sentinelPorts: number[]): Promise<number[]> {
  return Promise.all(
    sentinelPorts.map(async (port) =>
      Number((await command<string[] | null>(port, 'SENTINEL', 'GET-MASTER-ADDR-BY-NAME', SENTINEL_MASTER))?.[1]),
    ),
  );
}

/** The roles when every Sentinel names the same one of the two nodes as primary; else undefined. */
function rolesNamed(named: number[], { primary, replica }: Roles): Roles | undefined {
  if (!named.every((p) => p === named[0])) return undefined;
  if (named[0] === primary.port) return { primary, replica };
  if (named[0] === replica.port) return { primary: replica, replica: primary };
  return undefined;
}

/** What the Sentinel at `port` still lacks to fail over to `replica`; undefined once nothing. */
async function replicaMissing(port: number, replica: RedisNode, otherSentinels: number): Promise<string | undefined> {
  const replicas = await command<string[][]>(port, 'SENTINEL', 'REPLICAS', SENTINEL_MASTER);
  const f = replicas.map(fields).find((r) => r.port === String(replica.port));
  const others = await command<unknown[]>(port, 'SENTINEL', 'SENTINELS', SENTINEL_MASTER);
  const ready =
    f !== undefined &&
    !/s_down|o_down|disconnected/.test(f.flags ?? '') &&
    f['master-link-status'] === 'ok' &&
    others.length >= otherSentinels;
  if (ready) return undefined;
  const state = f ? `flags ${f.flags}, link ${f['master-link-status']}` : 'unknown';
  return `replica :${replica.port} ${state}, ${others.length} other sentinels`;
}

function fields(flat: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i]!] = flat[i + 1]!;
  return out;
}
