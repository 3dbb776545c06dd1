import { SpanKind, SpanStatusCode, isSpanContextValid, trace, type Context, type Span } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import { BackendUnavailableError } from '../errors.js';
import type { Claim } from '../ledger/run-ledger.js';
import { SpanAttr, contextFrom, tracer } from '../tracing.js';
import type { AttemptMetrics } from './attempt-metrics.js';

/**
 * The state the ledger records for an attempt that ended with a delivery's status. Statuses not
 * here (busy, locked, early: nothing was claimed) end no attempt; a workflow run's start completes
 * its attempt, a wait for a concurrency slot skips it, a hand-back (shutdown, unknown job) retries it.
 */
const LEDGER_OUTCOME: Readonly<Record<string, string>> = {
  completed: 'completed',
  started: 'completed',
  skipped: 'skipped',
  waiting: 'skipped',
  stale: 'stale',
  cancelled: 'cancelled',
  superseded: 'superseded',
  interrupted: 'retrying',
  'unknown-job': 'retrying',
  failed: 'failed',
  retrying: 'retrying',
  // The ledger did not answer: the attempt ends here and its run is delivered again (its row says
  // 'retrying' when the failure could still be recorded, else 'stale' once another claim takes it).
  unavailable: 'retrying',
};

/**
 * What one delivery of a run leaves behind for the operator: a consumer span (the child of the
 * fire that committed the run, when its traceparent came along) and, once it is over, one info
 * line with job, run id, attempt, outcome, duration and execution token, and the attempt counted
 * in the replica's metrics (attempt-metrics.ts) as the ledger records it.
 */
export class AttemptReport {
  readonly span: Span;
  /** The context to run the attempt in: handlers' own spans become children of the attempt's. */
  readonly context: Context;
  private readonly startedAt: number;
  private claim: Claim | undefined;
  private claimedAt = 0;
  /** The job of a run delivered after it finished (recorded as a skipped attempt, nothing claimed). */
  private finishedJob: string | undefined;
  /** No retry follows a failure of this attempt (known once the run is claimed). */
  finalAttempt = true;

  constructor(
    private readonly runId: bigint,
    private readonly replicaId: string,
    traceparent: string | undefined,
    private readonly logger: Logger,
    private readonly clock: Clock,
    private readonly metrics?: AttemptMetrics,
  ) {
    this.startedAt = clock.monotonic();
    const parent = contextFrom(traceparent);
    this.span = tracer.startSpan(
      'cronwarden.attempt',
      {
        kind: SpanKind.CONSUMER,
        attributes: { [SpanAttr.runId]: runId.toString(), [SpanAttr.replica]: replicaId },
      },
      parent,
    );
    // With no SDK registered the span is the API's no-op, with an invalid context: the attempt
    // runs in its parent's context as it is (setSpan copies the context's values, about 0.5 KB a
    // run, for a span nothing reads).
    this.context = isSpanContextValid(this.span.spanContext()) ? trace.setSpan(parent, this.span) : parent;
  }

  /** The ledger granted this delivery an attempt. */
  claimed(claim: Claim): void {
    this.claim = claim;
    this.claimedAt = this.clock.monotonic();
    this.span.setAttributes({
      [SpanAttr.job]: claim.job,
      [SpanAttr.attempt]: claim.attempt,
      [SpanAttr.executionToken]: claim.token.toString(),
    });
  }

  /** The run was finished already: the ledger records this delivery as a skipped attempt of `job`. */
  alreadyFinished(job: string | undefined): void {
    this.finishedJob = job;
  }

  /** The delivery resolved with `status`. */
  finished(status: string): void {
    this.end(status);
  }

  /** The delivery threw: the handler failed (retried or final) or the ledger was unreachable. */
  failed(err: unknown): void {
    const outcome = err instanceof BackendUnavailableError ? 'unavailable' : this.finalAttempt ? 'failed' : 'retrying';
    this.span.recordException(err as Error);
    this.span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message });
    this.end(outcome, err);
  }

  private end(outcome: string, err?: unknown): void {
    this.span.setAttribute(SpanAttr.outcome, outcome);
    this.span.end();
    this.count(outcome);
    // No claim: nothing ran (already finished, or shutting down); the executor logs those itself.
    if (!this.claim) return;
    this.logger.info(
      {
        job: this.claim.job,
        runId: this.runId.toString(),
        attempt: this.claim.attempt,
        outcome,
        durationMs: Math.round(this.clock.monotonic() - this.startedAt),
        token: this.claim.token.toString(),
        ...(err instanceof Error ? { error: err.message } : {}),
      },
      'run attempt finished',
    );
  }

  private count(status: string): void {
    const outcome = LEDGER_OUTCOME[status];
    if (!this.metrics || outcome === undefined) return;
    const claim = this.claim;
    if (!claim) {
      if (outcome === 'skipped' && this.finishedJob !== undefined)
        this.metrics.ended({ job: this.finishedJob, outcome, seconds: 0, attempt: 0 });
      return;
    }
    const step = claim.workflow && {
      name: claim.workflow.step,
      ...(claim.workflow.madeAt && {
        handOffSeconds: (claim.claimedAt.getTime() - claim.workflow.madeAt.getTime()) / 1000,
      }),
    };
    this.metrics.ended({
      job: claim.job,
      outcome,
      seconds: (this.clock.monotonic() - this.claimedAt) / 1000,
      attempt: claim.attempt,
      ...(step && { step }),
    });
  }
}
