import { SpanKind, SpanStatusCode, trace, type Context, type Span } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { Clock } from '../clock.js';
import { BackendUnavailableError } from '../errors.js';
import type { Claim } from '../ledger/run-ledger.js';
import { SpanAttr, contextFrom, tracer } from '../tracing.js';

/**
 * What one delivery of a run leaves behind for the operator: a consumer span (the child of the
 * fire that committed the run, when its traceparent came along) and, once it is over, one info
 * line with job, run id, attempt, outcome, duration and execution token.
 */
export class AttemptReport {
  readonly span: Span;
  /** The context to run the attempt in: handlers' own spans become children of the attempt's. */
  readonly context: Context;
  private readonly startedAt: number;
  private claim: Claim | undefined;
  /** No retry follows a failure of this attempt (known once the run is claimed). */
  finalAttempt = true;

  constructor(
    private readonly runId: bigint,
    private readonly replicaId: string,
    traceparent: string | undefined,
    private readonly logger: Logger,
    private readonly clock: Clock,
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
    this.context = trace.setSpan(parent, this.span);
  }

  /** The ledger granted this delivery an attempt. */
  claimed(claim: Claim): void {
    this.claim = claim;
    this.span.setAttributes({
      [SpanAttr.job]: claim.job,
      [SpanAttr.attempt]: claim.attempt,
      [SpanAttr.executionToken]: claim.token.toString(),
    });
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
}
