/**
 * Flow control of a claimed run, before its handler starts: a slot of its concurrency key
 * (run-limits.ts), then its turn under its rate limit (run-rate-limits.ts). A run that must wait
 * goes back to the ledger with the reason (pending, its attempt recorded skipped), not into a
 * worker; it is delivered again when a slot frees or its turn comes.
 */
import type { Logger } from 'pino';
import { InvalidArgumentError } from '../errors.js';
import type { Claim, RunLedger, SlotRequest } from '../ledger/run-ledger.js';
import { limitKey, type ConcurrencyLimit, type JobDefinition, type RateLimit } from './define-job.js';
import { ledgerCall } from './ledger-call.js';
import { messageOf } from './settlement.js';

/** The ledger operations flow control uses. */
export type FlowLedger = Pick<
  RunLedger,
  'acquireSlot' | 'releaseSlot' | 'waitInLedger' | 'slotWaiters' | 'takeRateStart'
>;

/** Hand a run to the queue again, to be delivered after `delayMs`. */
export type Redeliver = (run: { runId: bigint; attempt: number }, delayMs: number) => Promise<void>;

/** What the run may do: start (and call `done` once its handler returned), or it waits in the ledger. */
export type Admission = { status: 'go'; done: () => Promise<void> } | { status: 'waiting'; reason: string };

const GO: Admission = { status: 'go', done: async () => {} };

/** The job's (or step's) flow control options. */
export type FlowPolicy = Pick<JobDefinition, 'concurrency' | 'rateLimit' | 'priority'>;

/** Whether runs under `policy` pass through flow control at all (a concurrency or a rate limit). */
export function isLimited(policy: FlowPolicy): boolean {
  return Boolean(policy.concurrency || policy.rateLimit);
}

export class FlowControl {
  /** Slots whose handler returned but that the ledger could not free yet: freed with the next. */
  private readonly unreleased = new Set<SlotRequest>();

  constructor(
    private readonly o: {
      ledger: FlowLedger | undefined;
      worker: string;
      redeliver: Redeliver | undefined;
    },
  ) {}

  /**
   * Admit a claimed run under its policy. Throws InvalidArgumentError when a key function threw or
   * returned a bad key (a failure of the run), BackendUnavailableError when the ledger is down.
   */
  async admit(claim: Claim, policy: FlowPolicy, log: Logger): Promise<Admission> {
    if (!isLimited(policy)) return GO;
    const slot = policy.concurrency && slotRequest(policy.concurrency, policy.priority, claim);
    const rate = policy.rateLimit && rateKey(policy.rateLimit, claim);
    const ledger = this.ledger();
    if (slot) {
      await this.releaseLeftovers(log);
      const got = await ledgerCall(`slot of run ${claim.runId}`, () => ledger.acquireSlot(slot, this.o.worker));
      if (got.status === 'full') {
        await ledgerCall(`wait of run ${claim.runId}`, () => ledger.waitInLedger(claim, got.reason, { slot }));
        log.info({ key: slot.key, reason: got.reason }, 'run waits for a concurrency slot');
        if (got.wakeOlder) await this.wakeWaiters(slot.key, claim.runId, log);
        return { status: 'waiting', reason: got.reason };
      }
    }
    if (rate) {
      const turn = await ledgerCall(`rate limit of run ${claim.runId}`, () =>
        ledger.takeRateStart({
          runId: claim.runId,
          key: rate,
          max: policy.rateLimit!.max,
          perMs: policy.rateLimit!.perMs,
        }),
      );
      if (turn.status === 'later') {
        // The slot goes back first: a run waiting for its turn holds none.
        if (slot) await this.free(slot, log);
        await ledgerCall(`wait of run ${claim.runId}`, () =>
          ledger.waitInLedger(claim, turn.reason, { until: turn.at }),
        );
        await this.o.redeliver?.(claim, turn.waitMs).catch((err: Error) => {
          // The re-delivery sweep hands it over once its turn is past.
          log.warn({ err }, 'could not hand over the run for its turn');
        });
        log.info({ key: rate, reason: turn.reason }, 'run waits for its turn under a rate limit');
        return { status: 'waiting', reason: turn.reason };
      }
    }
    return slot ? { status: 'go', done: () => this.free(slot, log) } : GO;
  }

  /** The handler returned: free its slot, and deliver the oldest run waiting for one. */
  private async free(slot: SlotRequest, log: Logger): Promise<void> {
    try {
      await this.ledger().releaseSlot(slot);
      this.unreleased.delete(slot);
    } catch (err) {
      // Held until it is released or this worker stops beating: never more runs than slots.
      this.unreleased.add(slot);
      log.warn({ err, key: slot.key }, 'could not release the concurrency slot; trying again with the next run');
    }
    await this.wakeWaiters(slot.key, slot.runId, log);
  }

  private async releaseLeftovers(log: Logger): Promise<void> {
    for (const slot of [...this.unreleased]) await this.free(slot, log);
  }

  /** Deliver the first run waiting for a slot of `key` (not `except`), to take the slot that freed. */
  private async wakeWaiters(key: string, except: bigint, log: Logger): Promise<void> {
    try {
      const waiters = (await this.ledger().slotWaiters(key, 2)).filter((w) => w.runId !== except);
      const head = waiters[0];
      if (head) await this.o.redeliver?.({ runId: head.runId, attempt: head.attempts }, 0);
    } catch (err) {
      // The leader's re-delivery sweep delivers a waiting run again in any case.
      log.warn({ err, key }, 'could not wake the run waiting for a concurrency slot');
    }
  }

  /** The flow control ledger: a limited run claimed here without one is a wiring mistake. */
  private ledger(): FlowLedger {
    if (!this.o.ledger)
      throw new InvalidArgumentError(
        'a run with a concurrency or rate limit was claimed, but the executor has no limits ledger',
      );
    return this.o.ledger;
  }
}

/** The slot a claimed run of a job with a concurrency limit asks for. */
function slotRequest(limit: ConcurrencyLimit, priority: number, claim: Claim): SlotRequest {
  const key = keyOf(limit.key, 'concurrency', claim);
  return { runId: claim.runId, token: claim.token, attempt: claim.attempt, key, limit: limit.limit, priority };
}

function rateKey(limit: RateLimit, claim: Claim): string {
  return keyOf(limit.key, 'rate limit', claim);
}

/** A limit's key, computed from the run when it is a function, and checked. */
function keyOf(key: ConcurrencyLimit['key'], what: string, claim: Claim): string {
  let value: unknown;
  try {
    value =
      typeof key === 'string' ? key : key({ job: claim.job, scheduledAt: claim.scheduledAt, payload: claim.payload });
  } catch (err) {
    throw new InvalidArgumentError(`${what} key of run ${claim.runId}: the key function threw: ${messageOf(err)}`, {
      cause: err,
    });
  }
  const checked = limitKey.safeParse(value);
  if (!checked.success)
    throw new InvalidArgumentError(`${what} key of run ${claim.runId}: ${checked.error.issues[0]!.message}`);
  return checked.data;
}
