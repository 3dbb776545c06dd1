/**
 * /healthz and /readyz on a listener of their own, served by the scheduler's thread (the one that
 * fires and renews the lease): a flood of admin connections lands on the admin thread and its port,
 * so probes do not queue behind readers for a connection or a turn of the admin event loop, and
 * Kubernetes probes (which may target any port) see the scheduler itself. Both answers read memory,
 * except /readyz's shared check of the lease backend and the ledger pool. node:http, not Fastify:
 * two routes.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { systemClock, type Clock, type TimerHandle } from '../clock.js';
import type { LeaseBackend } from '../locks/lease.js';
import { health, readiness, readinessCheck, type ProbeAnswer, type Readiness } from './probes.js';
import type { ReplicaView } from './replica-view.js';

/** Where the probe listener binds. */
export interface ProbeListenOptions {
  /** Default 127.0.0.1 (or the admin server's host, when it makes the listener). */
  host?: string;
  /** 0 picks a free port. */
  port: number;
}

export interface ProbeServerOptions extends ProbeListenOptions {
  replica: ReplicaView;
  backend: Pick<LeaseBackend, 'current'>;
  /** How long /readyz waits for the backend and the database. Default 2 s. */
  readyTimeoutMs?: number;
  /** /healthz fails when this thread's event loop has been silent this long (default 5 s). */
  stallLimitMs?: number;
  /** Measures this thread's event loop (its heartbeat timer and the time). Default: the system's. */
  loopClock?: Clock;
}

/** How often this thread's heartbeat ticks (as the admin thread hears from the main thread). */
const BEAT_MS = 250;
const IDLE_MS = 5000;

export class ProbeServer {
  private readonly server: Server;
  private readonly ready: Readiness;
  private readonly loop: Clock;
  private lastBeat: number;
  private beat: TimerHandle | undefined;

  constructor(private readonly o: ProbeServerOptions) {
    this.loop = o.loopClock ?? systemClock;
    this.lastBeat = this.loop.monotonic();
    this.ready = readinessCheck(o.replica, o.backend, o.readyTimeoutMs ?? 2000, () => this.loop.monotonic());
    this.server = createServer(
      { requestTimeout: IDLE_MS, headersTimeout: IDLE_MS, keepAliveTimeout: IDLE_MS },
      (req, res) => void this.serve(req, res),
    );
    // Probes come one at a time from a kubelet or a load balancer; a pile-up here is not a probe.
    this.server.maxConnections = 64;
  }

  /** Listens; resolves to the base URL (http://host:port). */
  async listen(): Promise<string> {
    const host = this.o.host ?? '127.0.0.1';
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.o.port, host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    this.tick();
    const addr = this.server.address();
    const port = typeof addr === 'object' && addr ? addr.port : this.o.port;
    return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  }

  async close(): Promise<void> {
    this.beat?.cancel();
    this.beat = undefined;
    if (!this.server.listening) return;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeAllConnections();
    await closed;
  }

  /**
   * Why this thread's event loop cannot be vouched for: its heartbeat is older than the limit. A
   * loop that is wedged answers nothing (the probe's timeout fails it); this catches the request
   * read just after a long block, before the heartbeat's timer had its turn.
   */
  stalled(): string | undefined {
    const silentMs = this.loop.monotonic() - this.lastBeat;
    if (silentMs <= (this.o.stallLimitMs ?? 5000)) return undefined;
    return `the scheduler's event loop has not answered for ${Math.round(silentMs)} ms`;
  }

  private tick(): void {
    this.lastBeat = this.loop.monotonic();
    this.beat = this.loop.setTimer(() => this.tick(), BEAT_MS);
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    let answer: ProbeAnswer;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('allow', 'GET, HEAD');
      answer = { status: 405, body: { error: 'probes answer GET and HEAD only', code: 'method_not_allowed' } };
    } else if (path === '/healthz') answer = health(this.o.replica, this.stalled());
    else if (path === '/readyz') answer = await readiness(this.ready);
    else answer = { status: 404, body: { error: 'this listener serves /healthz and /readyz', code: 'not_found' } };
    const body = JSON.stringify(answer.body);
    res.writeHead(answer.status, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(body),
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
    });
    res.end(req.method === 'HEAD' ? undefined : body);
  }
}
