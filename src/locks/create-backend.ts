import type { Clock } from '../clock.js';
import { InvalidConfigError } from '../errors.js';
import type { BackendKind, LeaseBackend } from './lease.js';
import { MemoryLeaseBackend } from './memory.js';

export type BackendConfig =
  | { kind: 'etcd'; endpoints: string[] }
  | { kind: 'redis'; url: string }
  | { kind: 'postgres'; url: string; schema?: string; namespace?: string }
  | { kind: 'memory' };

export const backendKinds: readonly BackendKind[] = ['etcd', 'redis', 'postgres', 'memory'];

/**
 * Build a lease backend from configuration; a missing address is a clear error, not a hang.
 * Each backend's client library is loaded only when it is chosen (etcd3 brings gRPC with it).
 */
export async function createLeaseBackend(config: BackendConfig, clock?: Clock): Promise<LeaseBackend> {
  switch (config.kind) {
    case 'etcd':
      if (config.endpoints.length === 0)
        throw new InvalidConfigError('backend.endpoints', 'etcd needs at least one endpoint');
      return new (await loadEtcdBackend()).EtcdLeaseBackend({ endpoints: config.endpoints, clock });
    case 'redis':
      if (!config.url) throw new InvalidConfigError('backend.url', 'redis needs a URL such as redis://127.0.0.1:6379');
      if (config.url.startsWith('redis-sentinel:'))
        return new (await import('./redis.js')).RedisLeaseBackend({ sentinel: parseSentinelUrl(config.url), clock });
      return new (await import('./redis.js')).RedisLeaseBackend({ url: config.url, clock });
    case 'postgres':
      if (!config.url)
        throw new InvalidConfigError('backend.url', 'postgres needs a URL such as postgres://user@host/db');
      return new (await import('./postgres.js')).PostgresLeaseBackend({
        connectionString: config.url,
        schema: config.schema,
        namespace: config.namespace,
        clock,
      });
    case 'memory':
      return new MemoryLeaseBackend({ clock });
    default: {
      const kind: string = (config as { kind: string }).kind;
      throw new InvalidConfigError(
        'backend.kind',
        `unknown backend "${kind}"; expected one of ${backendKinds.join(', ')}`,
      );
    }
  }
}

/**
 * etcd3 (with gRPC and protobufjs, about 10 MB) is an optional peer dependency: only those who
 * choose the etcd backend install it, so its absence is a configuration error that says what to do.
 */
async function loadEtcdBackend(): Promise<typeof import('./etcd.js')> {
  try {
    await import('etcd3');
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code !== 'ERR_MODULE_NOT_FOUND' || !e.message.includes("'etcd3'")) throw err;
    throw new InvalidConfigError(
      'backend.kind',
      'the etcd backend needs the etcd3 package, which is not installed: run `npm i etcd3` in your application',
    );
  }
  return import('./etcd.js');
}

/**
 * `redis-sentinel://host:port,host:port,.../name`: reach the Redis primary that the Sentinels at
 * those addresses monitor under `name` (ioredis asks them, and again after a failover).
 */
export function parseSentinelUrl(url: string): { sentinels: { host: string; port: number }[]; name: string } {
  const m = /^redis-sentinel:\/\/([^/]+)\/([^/?#]+)$/.exec(url);
  const sentinels = (m?.[1] ?? '').split(',').map((hp) => {
    const [host, port] = hp.split(':');
    return { host: host ?? '', port: Number(port ?? 26379) };
  });
  if (!m || sentinels.some((s) => !s.host || !Number.isInteger(s.port) || s.port <= 0 || s.port > 65535)) {
    throw new InvalidConfigError(
      'backend.url',
      `"${url}" is not a Sentinel URL such as redis-sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster`,
    );
  }
  return { sentinels, name: decodeURIComponent(m[2]!) };
}
