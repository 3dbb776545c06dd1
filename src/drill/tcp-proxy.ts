/**
 * A TCP proxy that stands on the link between one replica and a backend, so the drill can cut
 * that link or make it slow or lossy while every other replica's link stays healthy.
 *
 * Hand-written (about 150 lines of node:net): Toxiproxy is the maintained tool for this, but it is
 * a Go server that neither npm nor Debian ships here, and the npm TCP proxies forward bytes without
 * any way to hold, delay or cut them.
 *
 * What each condition does, in terms of what a client sees on a real network:
 * - cut: a partition. Bytes stop in both directions and are held, new connections are accepted
 *   but reach nothing; on heal the held bytes arrive in order, as TCP retransmissions would.
 * - delay ± jitter: every chunk arrives that much later, per direction, never reordered.
 * - loss: TCP never loses bytes, it retransmits; a lost segment costs a retransmission timeout
 *   (Linux's minimum RTO is 200 ms, doubling when the retransmission is lost too) and everything
 *   behind it waits. That is how packet loss looks to a lease client, so that is what is modelled.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface LinkConditions {
  /** One-way delay added to every chunk, in each direction. */
  delayMs?: number;
  /** Uniform ± spread around delayMs (clamped at zero). */
  jitterMs?: number;
  /** Chance that a chunk is "lost" and arrives one retransmission timeout later. */
  lossRate?: number;
  /** The first retransmission timeout; doubles for each further loss of the same chunk. */
  retransmitMs?: number;
}

export interface ProxyStats {
  connections: number;
  chunks: number;
  lost: number;
  held: number;
}

type Item = Buffer | 'end';

/**
 * One direction of one connection: a FIFO of chunks, each with the time it may leave, drained by
 * one timer for the head. Chunks never overtake each other, however their delays are drawn.
 */
class Lane {
  private lastAt = 0;
  private queue: { at: number; item: Item }[] = [];
  private held: Item[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly proxy: TcpProxy,
    private target: Socket | undefined,
  ) {}

  attach(target: Socket): void {
    this.target = target;
    this.flush();
    this.drain();
  }

  push(item: Item): void {
    if (this.proxy.isCut || this.held.length) {
      this.held.push(item);
      return;
    }
    const now = Date.now();
    this.lastAt = Math.max(now + this.proxy.delayFor(), this.lastAt);
    this.queue.push({ at: this.lastAt, item });
    this.drain();
  }

  /** A partition began: chunks still on their way are held too, ahead of anything sent later. */
  hold(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.held = [...this.queue.map((q) => q.item), ...this.held];
    this.queue = [];
  }

  /** After a heal or once the upstream connects: what was held goes out first, in order. */
  flush(): void {
    if (this.proxy.isCut || !this.target) return;
    const items = this.held;
    this.held = [];
    for (const item of items) this.write(item);
  }

  get heldCount(): number {
    return this.held.length + this.queue.length;
  }

  private drain(): void {
    if (this.timer) return;
    const now = Date.now();
    // Until the upstream connects, due chunks wait for attach() to drain them.
    while (this.target && this.queue.length && this.queue[0]!.at <= now) {
      const { item } = this.queue.shift()!;
      this.write(item);
    }
    if (this.target && this.queue.length) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.drain();
      }, this.queue[0]!.at - now);
    }
  }

  private write(item: Item): void {
    if (!this.target || this.target.destroyed) return;
    if (item === 'end') this.target.end();
    else this.target.write(item);
  }
}

interface Link {
  client: Socket;
  upstream: Socket | undefined;
  up: Lane;
  down: Lane;
}

export class TcpProxy {
  private conditions: LinkConditions = {};
  private cut = false;
  private readonly links = new Set<Link>();
  private readonly counters = { connections: 0, chunks: 0, lost: 0 };

  private constructor(
    private readonly server: Server,
    readonly port: number,
    private target: { host: string; port: number },
    private readonly random: () => number,
  ) {
    server.on('connection', (client) => this.accept(client));
  }

  /** Listen on a free loopback port and forward to `target`. `random` seeds jitter and loss. */
  static async start(target: { host: string; port: number }, random: () => number = Math.random): Promise<TcpProxy> {
    const server = createServer({ noDelay: true });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const { port } = server.address() as { port: number };
    return new TcpProxy(server, port, target, random);
  }

  get isCut(): boolean {
    return this.cut;
  }

  /** Partition the link: nothing passes until heal(). */
  partition(): void {
    this.cut = true;
    for (const link of this.links) {
      link.up.hold();
      link.down.hold();
    }
  }

  /** Degrade the link from now on (replaces earlier conditions). */
  degrade(conditions: LinkConditions): void {
    this.conditions = { ...conditions };
  }

  /** A healthy link again: no partition, no delay, no loss; held bytes are delivered. */
  heal(): void {
    this.cut = false;
    this.conditions = {};
    for (const link of this.links) {
      if (!link.upstream) this.connectUpstream(link);
      link.up.flush();
      link.down.flush();
    }
  }

  /** New connections go to `target` from now on (a promoted standby); open ones keep theirs. */
  retarget(target: { host: string; port: number }): void {
    this.target = { ...target };
  }

  get stats(): ProxyStats {
    let held = 0;
    for (const l of this.links) held += l.up.heldCount + l.down.heldCount;
    return { ...this.counters, held };
  }

  /** The delay of the next chunk: jittered delay plus a retransmission timeout per loss. */
  delayFor(): number {
    const { delayMs = 0, jitterMs = 0, lossRate = 0, retransmitMs = 200 } = this.conditions;
    this.counters.chunks++;
    let wait = Math.max(0, delayMs + (this.random() * 2 - 1) * jitterMs);
    for (let rto = retransmitMs; lossRate > 0 && this.random() < lossRate && rto <= 60_000; rto *= 2) {
      this.counters.lost++;
      wait += rto;
    }
    return wait;
  }

  async close(): Promise<void> {
    for (const link of this.links) {
      link.client.destroy();
      link.upstream?.destroy();
    }
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: Socket): void {
    this.counters.connections++;
    const link: Link = { client, upstream: undefined, up: new Lane(this, undefined), down: new Lane(this, client) };
    this.links.add(link);
    const drop = () => {
      this.links.delete(link);
      client.destroy();
      link.upstream?.destroy();
    };
    client.on('data', (chunk) => link.up.push(chunk));
    client.on('end', () => link.up.push('end'));
    client.on('error', drop);
    client.on('close', drop);
    if (!this.cut) this.connectUpstream(link);
  }

  private connectUpstream(link: Link): void {
    const upstream = connect({ host: this.target.host, port: this.target.port, noDelay: true });
    link.upstream = upstream;
    upstream.on('connect', () => link.up.attach(upstream));
    upstream.on('data', (chunk) => link.down.push(chunk));
    upstream.on('end', () => link.down.push('end'));
    // A backend that goes away (killed, restarted) takes the client's connection with it, as
    // it would without the proxy; the client reconnects through the proxy.
    const drop = () => {
      this.links.delete(link);
      upstream.destroy();
      link.client.destroy();
    };
    upstream.on('error', drop);
    upstream.on('close', drop);
  }
}
