import type { Logger } from 'pino';
import type { Ledger } from '../ledger/ledger.js';
import { LedgerClock } from '../scheduler/election/ledger-clock.js';

/** Warn when this host's wall clock is further than this from the ledger's. */
const HOST_CLOCK_WARN_MS = 1000;

/** The scheduler's default clock: the ledger's time, with a warning when this host's differs much. */
export function schedulerClock(ledger: Pick<Ledger, 'serverTime'>, logger: Logger): LedgerClock {
  return new LedgerClock({
    readServerTime: () => ledger.serverTime(),
    onSync: ({ hostOffsetMs, errorMs }) => {
      if (Math.abs(hostOffsetMs) > HOST_CLOCK_WARN_MS)
        logger.warn(
          { hostOffsetMs, errorMs },
          'host clock differs from the ledger clock; scheduling by the ledger clock',
        );
    },
    onError: (err) => logger.warn({ err: err.message }, 'could not read the ledger clock; keeping the last sync'),
  });
}
