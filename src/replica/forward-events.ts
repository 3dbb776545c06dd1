import type { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { ReplicaEvents } from '../admin/replica-view.js';
import type { Elector } from '../scheduler/election/elector.js';
import type { FireLoop } from '../scheduler/firing/fire-loop.js';

type Warn = (kind: string, fields: object, message: string) => void;

/**
 * Re-emit the elector's and the fire loop's events as the replica's, and log the ones an operator
 * reads: a resign or stop is info, a lost lease a warning; a renew that fails once and then
 * succeeds is not worth a warning each time (the first error of a kind, then one line a minute
 * with the count; the recovery at info).
 */
export function forwardEvents(
  to: EventEmitter<ReplicaEvents>,
  elector: Elector,
  fireLoop: FireLoop,
  logger: Logger,
  warn: Warn,
  /** False with sharded leadership: the replica announces its own, aggregate role. */
  forwardRole = true,
): void {
  if (forwardRole) elector.on('role:changed', (role) => to.emit('role:changed', role));
  elector.on('lease:acquired', (lease) => to.emit('lease:acquired', lease));
  elector.on('lease:renewed', (lease, ms) => to.emit('lease:renewed', lease, ms));
  elector.on('lease:lost', (lease, reason, end) => {
    const normal = reason === 'resigned' || reason === 'stopped';
    logger[normal ? 'info' : 'warn']({ token: lease.token.toString(), reason }, 'leadership ended');
    to.emit('lease:lost', lease, reason, end);
  });
  let errorsSinceSuccess = 0;
  elector.on('backend:error', (err) => {
    errorsSinceSuccess++;
    warn(`backend:${err.name}:${err.message}`, { err: err.message }, 'lease backend error');
    to.emit('backend:error', err);
  });
  const recovered = () => {
    if (errorsSinceSuccess === 0) return;
    logger.info({ errors: errorsSinceSuccess }, 'lease backend answering again');
    errorsSinceSuccess = 0;
  };
  elector.on('lease:renewed', recovered);
  elector.on('lease:acquired', recovered);
  fireLoop.on('fire:committed', (...a) => to.emit('fire:committed', ...a));
  fireLoop.on('fire:duplicate', (...a) => to.emit('fire:duplicate', ...a));
  fireLoop.on('fire:refused', (...a) => to.emit('fire:refused', ...a));
  fireLoop.on('fire:missed', (...a) => to.emit('fire:missed', ...a));
  fireLoop.on('fire:skipped', (...a) => to.emit('fire:skipped', ...a));
  fireLoop.on('occurrences:missed', (...a) => to.emit('occurrences:missed', ...a));
  fireLoop.on('enqueue:failed', (...a) => to.emit('enqueue:failed', ...a));
}
