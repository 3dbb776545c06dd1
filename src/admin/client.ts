import { CronwardenError, InvalidArgumentError } from '../errors.js';

/**
 * 409s that another try can change: leadership moving (not_leader), or a newer leader fenced this
 * one out (fenced). A schedule that exists or a run that is not retryable stays so (CLI exit 2).
 */
const RETRYABLE_CONFLICTS: ReadonlySet<string> = new Set(['not_leader', 'fenced']);

/**
 * A failed admin call. 4xx are the caller's mistake (not retryable: CLI exit 2) but for the
 * conflicts another try can change; without a response, or on a 5xx, trying again may help.
 */
export class AdminRequestError extends CronwardenError {
  readonly retryable: boolean;
  constructor(
    readonly status: number | null,
    message: string,
    retryable?: boolean,
  ) {
    super(message);
    this.retryable = retryable ?? (status === null || status >= 500 || status === 409);
  }
}

/** The http(s) URL in `url`, or an error saying what an admin URL must look like. */
export function parseAdminUrl(url: string): URL {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new InvalidArgumentError('must be an http:// or https:// URL such as http://127.0.0.1:8080');
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:')
    throw new InvalidArgumentError('must be an http:// or https:// URL such as http://127.0.0.1:8080');
  return u;
}

/** scheme://host:port/path without a trailing slash, for comparing admin URLs. */
function normalized(url: string): string | null {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname.replace(/\/+$/, '')}`;
  } catch {
    return null;
  }
}

export interface AdminClientOptions {
  url: string;
  token?: string;
  timeoutMs?: number;
  /** Sent with mutations as x-cronwarden-user, recorded as who paused a job ("admin (<user>)"). */
  user?: string;
}

/**
 * Talks to one replica's admin HTTP. Leader-only calls (trigger, resign) sent to a follower come
 * back 409 with the leader's admin URL; the client follows that once.
 */
export class AdminClient {
  readonly baseUrl: string;

  constructor(private readonly o: AdminClientOptions) {
    parseAdminUrl(o.url);
    this.baseUrl = o.url.replace(/\/+$/, '');
  }

  get<T>(path: string): Promise<T> {
    return this.call<T>(this.baseUrl, 'GET', path);
  }

  /** POST a mutation; follows a 409 not_leader to the leader once. Returns the body and who answered. */
  async mutate<T>(path: string, body?: unknown, method = 'POST'): Promise<{ body: T; via: string }> {
    if (!this.o.token)
      throw new AdminRequestError(401, 'CRONWARDEN_ADMIN_TOKEN: is required for this command (the admin bearer token)');
    try {
      return { body: await this.call<T>(this.baseUrl, method, path, body), via: this.baseUrl };
    } catch (err) {
      if (!(err instanceof NotLeaderResponse)) throw err;
      if (!err.leaderAdminUrl)
        throw new AdminRequestError(
          409,
          `${this.baseUrl} is not the leader and the leader (${err.leader ?? 'none'}) has no known admin URL`,
        );
      const leaderUrl = await this.trustedLeaderUrl(err.leaderAdminUrl, err.leader);
      try {
        return { body: await this.call<T>(leaderUrl, method, path, body), via: leaderUrl };
      } catch (again) {
        if (again instanceof NotLeaderResponse)
          throw new AdminRequestError(409, `leadership is moving (${leaderUrl} is no longer the leader); try again`);
        throw again;
      }
    }
  }

  /**
   * The token goes only where the operator sent it, or to a replica the cluster knows: a 409's
   * leader URL is followed when it is the advertised admin URL of that member in /api/members of
   * the replica asked, over the same scheme. Anything else is named, not contacted.
   */
  private async trustedLeaderUrl(named: string, leader: string | null): Promise<string> {
    const refuse = (why: string) =>
      new AdminRequestError(
        409,
        `${this.baseUrl} is not the leader; it names ${named.slice(0, 200)} as the leader's admin URL, but ${why}, so the admin token was not sent there. If you trust that URL, run again with --url ${named.slice(0, 200)}`,
        false,
      );
    const target = normalized(named);
    if (target === null) throw refuse('that is not a URL');
    if (new URL(target).protocol !== new URL(this.baseUrl).protocol)
      throw refuse(`it is not ${new URL(this.baseUrl).protocol.slice(0, -1)} like ${this.baseUrl}`);
    const { members } = await this.call<{ members?: { replicaId: string; adminUrl: string | null }[] }>(
      this.baseUrl,
      'GET',
      '/api/members',
    );
    const known = (members ?? []).some(
      (m) => m.adminUrl !== null && normalized(m.adminUrl) === target && (leader === null || m.replicaId === leader),
    );
    if (!known) throw refuse(`no member${leader === null ? '' : ` "${leader}"`} advertises it`);
    return target;
  }

  private async call<T>(base: string, method: string, path: string, payload?: unknown): Promise<T> {
    let res: Response;
    const mutation = method !== 'GET';
    // Reads carry the token too, when there is one: a deployment may put them behind it (adminReadsNeedToken).
    const headers: Record<string, string> = this.o.token ? { authorization: `Bearer ${this.o.token}` } : {};
    if (payload !== undefined) headers['content-type'] = 'application/json';
    if (mutation && this.o.user) headers['x-cronwarden-user'] = this.o.user;
    try {
      res = await fetch(`${base}${path}`, {
        method,
        headers,
        body: payload === undefined ? undefined : JSON.stringify(payload),
        // A redirect is not followed: the token goes to no URL the operator did not name.
        redirect: this.o.token ? 'error' : 'follow',
        signal: AbortSignal.timeout(this.o.timeoutMs ?? 5000),
      });
    } catch (err) {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new AdminRequestError(
        null,
        `cannot reach ${base}: ${cause?.code ?? cause?.message ?? (err as Error).message}`,
      );
    }
    const text = await res.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = { error: text.slice(0, 200) };
    }
    if (res.ok) return body as T;
    const b = body as { error?: string; code?: string; leader?: string | null; leaderAdminUrl?: string | null };
    if (res.status === 409 && b.code === 'not_leader')
      throw new NotLeaderResponse(b.leader ?? null, b.leaderAdminUrl ?? null);
    const retryable = res.status === 409 ? RETRYABLE_CONFLICTS.has(b.code ?? '') : undefined;
    throw new AdminRequestError(res.status, `${method} ${path}: ${res.status} ${b.error ?? res.statusText}`, retryable);
  }
}

class NotLeaderResponse extends Error {
  constructor(
    readonly leader: string | null,
    readonly leaderAdminUrl: string | null,
  ) {
    super('not the leader');
  }
}
