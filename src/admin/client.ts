import { CronwardenError } from '../errors.js';

/** A failed admin call. 4xx other than 409 are the caller's mistake (not retryable: CLI exit 2). */
export class AdminRequestError extends CronwardenError {
  readonly retryable: boolean;
  constructor(
    readonly status: number | null,
    message: string,
  ) {
    super(message);
    this.retryable = status === null || status >= 500 || status === 409;
  }
}

export interface AdminClientOptions {
  url: string;
  token?: string;
  timeoutMs?: number;
}

/**
 * Talks to one replica's admin HTTP. Leader-only calls (trigger, resign) sent to a follower come
 * back 409 with the leader's admin URL; the client follows that once.
 */
export class AdminClient {
  readonly baseUrl: string;

  constructor(private readonly o: AdminClientOptions) {
    this.baseUrl = o.url.replace(/\/+$/, '');
  }

  get<T>(path: string): Promise<T> {
    return this.call<T>(this.baseUrl, 'GET', path);
  }

  /** POST a mutation; follows a 409 not_leader to the leader once. Returns the body and who answered. */
  async mutate<T>(path: string): Promise<{ body: T; via: string }> {
    if (!this.o.token) throw new AdminRequestError(401, 'CRONWARDEN_ADMIN_TOKEN: is required for this command (the admin bearer token)');
    try {
      return { body: await this.call<T>(this.baseUrl, 'POST', path), via: this.baseUrl };
    } catch (err) {
      if (!(err instanceof NotLeaderResponse)) throw err;
      if (!err.leaderAdminUrl) throw new AdminRequestError(409, `${this.baseUrl} is not the leader and the leader (${err.leader ?? 'none'}) has no known admin URL`);
      const leaderUrl = err.leaderAdminUrl.replace(/\/+$/, '');
      try {
        return { body: await this.call<T>(leaderUrl, 'POST', path), via: leaderUrl };
      } catch (again) {
        if (again instanceof NotLeaderResponse) throw new AdminRequestError(409, `leadership is moving (${leaderUrl} is no longer the leader); try again`);
        throw again;
      }
    }
  }

  private async call<T>(base: string, method: string, path: string): Promise<T> {
    let res: Response;
    try {
      res = await fetch(`${base}${path}`, {
        method,
        headers: method === 'POST' && this.o.token ? { authorization: `Bearer ${this.o.token}` } : {},
        signal: AbortSignal.timeout(this.o.timeoutMs ?? 5000),
      });
    } catch (err) {
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new AdminRequestError(null, `cannot reach ${base}: ${cause?.code ?? cause?.message ?? (err as Error).message}`);
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
    if (res.status === 409 && b.code === 'not_leader') throw new NotLeaderResponse(b.leader ?? null, b.leaderAdminUrl ?? null);
    throw new AdminRequestError(res.status, `${method} ${path}: ${res.status} ${b.error ?? res.statusText}`);
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
