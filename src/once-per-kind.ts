import type { Logger } from 'pino';

/**
 * Logs the first error of each kind, then at most one line a minute per kind saying how many more
 * were left out, so a flood of failing requests cannot flood the log.
 */
export class OncePerKind {
  private readonly seen = new Map<string, { at: number; suppressed: number }>();
  constructor(
    private readonly now: () => number,
    private readonly everyMs = 60_000,
  ) {}

  /** Returns how many of this kind were left out since the last line, or undefined to stay silent. */
  shouldLog(kind: string): number | undefined {
    const t = this.now();
    const s = this.seen.get(kind);
    if (s && t - s.at < this.everyMs) {
      s.suppressed++;
      return undefined;
    }
    if (!s && this.seen.size >= 100) return undefined; // kinds come from error codes; bound them too
    this.seen.set(kind, { at: t, suppressed: 0 });
    return s?.suppressed ?? 0;
  }
}

/**
 * A warn() that says the first line of each kind, then at most one a minute per kind with how many
 * it left out: reconnect storms and flapping backends stay readable, and a healthy cluster is quiet.
 */
export function limitedWarn(
  logger: Logger,
  now: () => number,
  everyMs = 60_000,
): (kind: string, fields: object, message: string) => void {
  const limiter = new OncePerKind(now, everyMs);
  return (kind, fields, message) => {
    const suppressed = limiter.shouldLog(kind);
    if (suppressed === undefined) return;
    logger.warn(suppressed > 0 ? { ...fields, suppressedSinceLast: suppressed } : fields, message);
  };
}
