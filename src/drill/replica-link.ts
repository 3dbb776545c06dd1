/**
 * The network link between one replica slot and the lease backend: a TcpProxy per backend
 * endpoint, and the backend configuration that points the replica at those proxies. The drill
 * cuts or degrades one slot's link while every other replica keeps a healthy one.
 */
import type { BackendConfig } from '../locks/create-backend.js';
import { DrillError } from '../errors.js';
import { TcpProxy, type LinkConditions } from './tcp-proxy.js';
import { InvalidArgumentError } from '../errors.js';

export class ReplicaLink {
  private constructor(
    readonly config: BackendConfig,
    private readonly proxies: TcpProxy[],
  ) {}

  static async open(backend: BackendConfig, random: () => number): Promise<ReplicaLink> {
    switch (backend.kind) {
      case 'etcd': {
        const proxies = await Promise.all(backend.endpoints.map((e) => TcpProxy.start(hostPort(e), random)));
        return new ReplicaLink(
          { kind: 'etcd', endpoints: backend.endpoints.map((e, i) => withPort(e, proxies[i]!.port)) },
          proxies,
        );
      }
      case 'redis':
        // Through Sentinel, clients learn the primary's own address: no proxy can stand in between.
        if (backend.url.startsWith('redis-sentinel:')) return new ReplicaLink(backend, []);
        return ReplicaLink.proxied(backend, random);
      case 'postgres':
        return ReplicaLink.proxied(backend, random);
      case 'memory':
        throw new InvalidArgumentError(
          'an in-process (memory) backend has no network link to cut: drill a redis, postgres or etcd backend',
        );
    }
  }

  private static async proxied(
    backend: { kind: 'redis' | 'postgres'; url: string },
    random: () => number,
  ): Promise<ReplicaLink> {
    const proxy = await TcpProxy.start(hostPort(backend.url), random);
    return new ReplicaLink({ kind: backend.kind, url: withPort(backend.url, proxy.port) }, [proxy]);
  }

  partition(): void {
    this.mustBeProxied();
    for (const p of this.proxies) p.partition();
  }

  degrade(conditions: LinkConditions): void {
    this.mustBeProxied();
    for (const p of this.proxies) p.degrade(conditions);
  }

  private mustBeProxied(): void {
    if (this.proxies.length === 0)
      throw new DrillError('this link has no proxy to cut or degrade (a lease reached through Sentinel)');
  }

  heal(): void {
    for (const p of this.proxies) p.heal();
  }

  async close(): Promise<void> {
    await Promise.all(this.proxies.map((p) => p.close()));
  }
}

function hostPort(url: string): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port) };
}

function withPort(url: string, port: number): string {
  const u = new URL(url);
  u.port = String(port);
  // URL keeps a trailing "/" on bare origins; etcd endpoints are written without one.
  return url.endsWith('/') || u.pathname !== '/' ? u.toString() : u.toString().replace(/\/$/, '');
}
