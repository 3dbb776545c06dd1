/**
 * The ledger's URL with libpq's multi-host form, which node-postgres (and pg-connection-string)
 * cannot parse: `postgres://user@h1:5432,h2:5433/db?target_session_attrs=read-write`.
 *
 * As libpq does: the hosts are tried in order, each within the connect timeout (`connect_timeout`
 * in seconds, else the pool's connectionTimeoutMillis, else 10 s); with
 * `target_session_attrs=read-write` (or `primary`) a server that answers but is read-only (a
 * standby not yet promoted) is passed over. The first that fits is kept for that connection; a
 * pool makes each new connection the same way, so after a failover its new connections reach the
 * promoted standby. A single-host URL without target_session_attrs goes to node-postgres as it is.
 *
 * No npm library does this for node-postgres (pg-connection-string takes one host; the `postgres`
 * driver does multi-host, but it is another driver), hence this file.
 */
import pg from 'pg';
import { InvalidArgumentError } from '../errors.js';
import { LedgerUnreachableError } from './postgres-unavailable.js';

export interface LedgerHost {
  host: string;
  port: number;
}

/** What a ledger URL asks of the server it connects to. */
export type TargetSessionAttrs = 'any' | 'read-write' | 'primary';

export interface LedgerUrl {
  hosts: LedgerHost[];
  targetSessionAttrs: TargetSessionAttrs;
  /** libpq's connect_timeout (per host), in ms, if the URL sets one. */
  connectTimeoutMs: number | undefined;
  /** A URL node-postgres parses, for each host: the same credentials, database and options. */
  urlFor(host: LedgerHost): string;
  /** `h1:5432,h2:5433/db`: where, without credentials, for messages. */
  where: string;
}

const SHAPE = /^(postgres(?:ql)?):\/\/(?:([^@/?#]*)@)?([^/?#]*)(\/[^?#]*)?(?:\?([^#]*))?$/;
const HOST = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]]+))(?::(\d+))?$/;
const SUPPORTED: readonly string[] = ['any', 'read-write', 'primary'];
const READ_ONLY = ['read-only', 'standby', 'prefer-standby'];

const bad = (message: string) => new InvalidArgumentError(`invalid ledger URL: ${message}`);

/** Parse a ledger URL, single- or multi-host; throws InvalidArgumentError saying what is wrong. */
export function parseLedgerUrl(url: string): LedgerUrl {
  const m = SHAPE.exec(url.trim());
  if (!m) throw bad('expected postgres://[user[:password]@]host[:port][,host[:port]…][/database][?options]');
  const [, scheme, userinfo, authority, path = '', query = ''] = m;
  const hosts = authority!.split(',').map((h, i) => parseHost(h, i));
  const params = new URLSearchParams(query);
  const tsa = params.get('target_session_attrs') ?? 'any';
  if (READ_ONLY.includes(tsa))
    throw bad(`target_session_attrs=${tsa}: the ledger is written to; use read-write (or primary)`);
  if (!SUPPORTED.includes(tsa)) throw bad(`target_session_attrs=${tsa}: must be one of ${SUPPORTED.join(', ')}`);
  if (hosts.length > 1 && (params.has('host') || params.has('port') || params.has('hostaddr')))
    throw bad('with several hosts in the URL, give no host, port or hostaddr option');
  const timeout = params.get('connect_timeout');
  if (timeout !== null && !/^[1-9][0-9]{0,5}$/.test(timeout))
    throw bad(`connect_timeout=${timeout}: must be a whole number of seconds, at least 1`);
  // libpq's own options, which node-postgres would pass to the server as settings.
  params.delete('target_session_attrs');
  params.delete('connect_timeout');
  const rest = params.size ? `?${params.toString()}` : '';
  const credentials = userinfo === undefined ? '' : `${userinfo}@`;
  return {
    hosts,
    targetSessionAttrs: tsa as TargetSessionAttrs,
    connectTimeoutMs: timeout === null ? undefined : Number(timeout) * 1000,
    urlFor: (h) => `${scheme}://${credentials}${hostPort(h)}${path}${rest}`,
    where: `${hosts.map(hostPort).join(',')}${path}`,
  };
}

function parseHost(text: string, index: number): LedgerHost {
  const m = HOST.exec(text);
  if (!m) throw bad(`host ${index + 1} ("${text.slice(0, 100)}") must be host[:port] or [ipv6][:port]`);
  const port = m[3] === undefined ? 5432 : Number(m[3]);
  if (!(port >= 1 && port <= 65535)) throw bad(`host ${index + 1}: port ${m[3]} is not 1-65535`);
  return { host: decodeURIComponent(m[1] ?? m[2]!), port };
}

const hostPort = (h: LedgerHost) => `${h.host.includes(':') ? `[${h.host}]` : h.host}:${h.port}`;

/** True when the URL needs the multi-host client (several hosts, or a session to check). */
export function needsHostChoice(u: LedgerUrl): boolean {
  return u.hosts.length > 1 || u.targetSessionAttrs !== 'any';
}

/** Settings for pg.Pool or, without `Client`, pg.Client (construct `Client` when it is set). */
export type LedgerConnection = Omit<pg.PoolConfig, 'Client'> & { Client?: typeof pg.Client };

/**
 * Settings for a pg.Pool (or pg.Client) on the ledger: the URL as it is when node-postgres can
 * take it, else a Client class that picks the host as libpq would.
 */
export function ledgerConnection(url: string): LedgerConnection {
  // Every other form (a Unix socket's ?host=, say) is node-postgres's to read, as before.
  const m = SHAPE.exec(url.trim());
  if (!m || (!m[3]!.includes(',') && !/(^|&)target_session_attrs=/.test(m[5] ?? ''))) return { connectionString: url };
  const u = parseLedgerUrl(url);
  if (!needsHostChoice(u)) return { connectionString: url };
  return { connectionString: u.urlFor(u.hosts[0]!), Client: multiHostClient(u) };
}

/** A pg.Client that connects to the first of the URL's hosts that fits its target_session_attrs. */
export function multiHostClient(u: LedgerUrl): typeof pg.Client {
  return class MultiHostClient extends pg.Client {
    private readonly settings: pg.ClientConfig;
    constructor(config?: string | pg.ClientConfig) {
      const c = typeof config === 'string' ? { connectionString: config } : { ...config };
      super({ ...c, connectionString: u.urlFor(u.hosts[0]!) });
      this.settings = c;
    }

    override connect(): Promise<pg.Client>;
    override connect(callback: (err: Error | null, client?: pg.Client) => void): void;
    override connect(callback?: (err: Error | null, client?: pg.Client) => void): Promise<pg.Client> | void {
      const done = this.connectToChosen().then(() => this as pg.Client);
      if (!callback) return done;
      done.then((client) => callback(null, client), callback);
    }

    private async connectToChosen(): Promise<void> {
      const host = await chooseHost(u, this.settings);
      const self = this as unknown as LedgerHost;
      self.host = host.host;
      self.port = host.port;
      await super.connect();
      // Promoted or demoted between the probe and now: checked again on this very connection.
      if (u.targetSessionAttrs !== 'any' && !(await fits(this, u.targetSessionAttrs))) {
        await this.end().catch(() => undefined);
        throw new LedgerUnreachableError(`${hostPort(host)} stopped being ${u.targetSessionAttrs} as we connected`);
      }
    }
  };
}

/** Is the server behind `client` what the URL asks for? */
async function fits(client: pg.Client, tsa: TargetSessionAttrs): Promise<boolean> {
  if (tsa === 'any') return true;
  const sql = tsa === 'primary' ? 'SELECT pg_is_in_recovery() AS v' : 'SHOW transaction_read_only';
  const v = (await client.query<{ v?: boolean; transaction_read_only?: string }>(sql)).rows[0];
  return tsa === 'primary' ? v?.v === false : v?.transaction_read_only === 'off';
}

/** The first host, in the URL's order, that answers within the timeout and fits. */
async function chooseHost(u: LedgerUrl, settings: pg.ClientConfig): Promise<LedgerHost> {
  const timeoutMs = u.connectTimeoutMs ?? settings.connectionTimeoutMillis ?? 10_000;
  const why: string[] = [];
  for (const host of u.hosts) {
    const probe = new pg.Client({ ...settings, connectionString: u.urlFor(host), connectionTimeoutMillis: timeoutMs });
    probe.on('error', () => undefined); // a lost probe is reported by its rejection
    try {
      await probe.connect();
      if (await fits(probe, u.targetSessionAttrs)) return host;
      why.push(`${hostPort(host)}: not ${u.targetSessionAttrs}`);
    } catch (err) {
      const e = err as Error & { code?: string };
      why.push(`${hostPort(host)}: ${e.code ?? e.message}`);
      // A refused login or a missing database is the same on every host: say so at once.
      if (e instanceof pg.DatabaseError && ['28P01', '28000', '3D000'].includes(e.code ?? '')) throw err;
    } finally {
      void probe.end().catch(() => undefined);
    }
  }
  throw new LedgerUnreachableError(`no ${u.targetSessionAttrs} server among ${u.where} (${why.join('; ')})`);
}
