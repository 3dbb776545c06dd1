import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import { maskCredentials } from '../redact.js';

/**
 * Small guards of the admin HTTP: which Host names it answers, the page's Content-Security-Policy,
 * how much handler text a response may carry, a cap on concurrent database reads, and logging an
 * error kind once rather than once per request. Each is a few lines; a library for any of them
 * (helmet, under-pressure) would need as much configuration as the code it replaces.
 */

/** Longest handler text (an error message or stack) one response field carries. */
export const MAX_SERVED_TEXT = 2000;

/**
 * `text` with credentials masked (rows stored before errors were masked on the way in) and cut to
 * `max` characters, with a marker saying how much was left out.
 */
export function boundText(text: string, max?: number): string;
export function boundText(text: string | null, max?: number): string | null;
export function boundText(raw: string | null, max = MAX_SERVED_TEXT): string | null {
  if (raw === null) return null;
  const text = maskCredentials(raw);
  if (text.length <= max) return text;
  return `${text.slice(0, max)}… [${text.length - max} more characters not shown]`;
}

/** The host name of a Host header value, lower-case, without port, brackets or a trailing dot. */
export function hostName(header: string): string | null {
  try {
    return new URL(`http://${header}`).hostname
      .replace(/^\[|\]$/g, '')
      .replace(/\.$/, '')
      .toLowerCase();
  } catch {
    return null;
  }
}

export interface HostPolicy {
  /** Names (not IP addresses) this server answers to, lower-case. */
  names: Set<string>;
}

/**
 * DNS rebinding sends the attacker's own name in Host. So: a Host that is an IP address literal is
 * always accepted (no rebinding can produce one; kubelet probes and Prometheus use the pod IP), and
 * a name only when it is loopback, the bind address, the advertised admin URL's host or listed by
 * the operator. The port is not compared: a name the attacker controls is refused whatever the port,
 * and a port-forward (`kubectl port-forward 9999:8080` sends `localhost:9999`) must keep working.
 */
export function hostPolicy(o: {
  bindHost: string;
  advertisedUrl?: string;
  allowedHosts?: string[];
  machineName?: string;
}): HostPolicy {
  const names = new Set<string>(['localhost']);
  const add = (h: string | null | undefined) => {
    const n = h ? hostName(h) : null;
    if (n && !isIP(n)) names.add(n);
  };
  add(o.bindHost.includes(':') ? `[${o.bindHost}]` : o.bindHost);
  if (o.advertisedUrl) {
    try {
      add(new URL(o.advertisedUrl).host);
    } catch {
      // The configuration validated it as a URL; an unparsable one adds no name.
    }
  }
  // A wildcard bind without a configured URL is advertised as http://<this machine's name>:port.
  if (o.machineName && (o.bindHost === '0.0.0.0' || o.bindHost === '::')) add(o.machineName);
  for (const h of o.allowedHosts ?? []) add(h);
  return { names };
}

/** True when `header` (a Host header; absent on HTTP/1.0) may be answered under `policy`. */
export function hostAllowed(policy: HostPolicy, header: string | undefined): boolean {
  if (header === undefined) return true; // no browser omits Host, so no rebinding without one
  const name = hostName(header);
  if (name === null) return false;
  return isIP(name) !== 0 || policy.names.has(name);
}

/**
 * True when a request's Origin (sent by browsers on cross-origin and on POST requests) names the
 * host it was sent to. Absent Origin (the CLI, curl) is allowed; "null" (sandboxed frames, file://)
 * is not.
 */
export function sameOrigin(origin: string | undefined, host: string | undefined): boolean {
  if (origin === undefined) return true;
  if (!host) return false;
  try {
    return new URL(origin).host.toLowerCase() === host.toLowerCase();
  } catch {
    return false;
  }
}

/**
 * A Content-Security-Policy for `html` that allows its own inline <script> and <style> blocks by
 * hash and nothing else inline; scripts, styles and everything else only from this origin (the
 * page loads its chart library from /assets/, served with nosniff; /api answers are JSON).
 */
export function pagePolicy(html: string): string {
  const hashes = (tag: string) =>
    [...html.matchAll(new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`, 'g'))].map(
      (m) => `'sha256-${createHash('sha256').update(m[1]!).digest('base64')}'`,
    );
  const scripts = hashes('script');
  const styles = hashes('style');
  return [
    "default-src 'self'",
    `script-src 'self' ${scripts.join(' ')}`.trimEnd(),
    `style-src 'self' ${styles.join(' ')}`.trimEnd(),
    "img-src 'self' data:",
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/** For every response that is not the page: nothing may load, nothing may frame it. */
export const apiPolicy = "default-src 'none'; frame-ancestors 'none'";

/**
 * At most `max` requests at once; beyond that the caller answers 503 at once rather than queueing
 * (a queue would only move the pile-up from the pool into memory). A counter, not a library:
 * p-limit and friends queue, and @fastify/under-pressure sheds on event-loop delay for all routes,
 * /healthz included, which is what must keep answering.
 */
export class ConcurrencyCap {
  private inFlight = 0;
  constructor(readonly max: number) {}

  get active(): number {
    return this.inFlight;
  }

  /** Runs `fn` when a slot is free; returns undefined without running it when none is. */
  async run<T>(fn: () => Promise<T>): Promise<{ value: T } | undefined> {
    if (this.inFlight >= this.max) return undefined;
    this.inFlight++;
    try {
      return { value: await fn() };
    } finally {
      this.inFlight--;
    }
  }
}

/**
 * Shares one in-flight check among concurrent callers and reuses its result for `reuseMs`, so a
 * flood of /readyz costs at most one database round trip at a time.
 */
export class SharedCheck<T> {
  private pending: Promise<T> | undefined;
  private last: { at: number; value: T } | undefined;
  constructor(
    private readonly fn: () => Promise<T>,
    private readonly now: () => number,
    private readonly reuseMs: number,
  ) {}

  get(): Promise<T> {
    if (this.last && this.now() - this.last.at < this.reuseMs) return Promise.resolve(this.last.value);
    this.pending ??= this.fn()
      .then((value) => {
        this.last = { at: this.now(), value };
        return value;
      })
      .finally(() => {
        this.pending = undefined;
      });
    return this.pending;
  }
}
