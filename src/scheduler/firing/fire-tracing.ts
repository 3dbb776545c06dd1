import { SpanKind, SpanStatusCode, context, trace } from '@opentelemetry/api';
import { StaleTokenError } from '../../errors.js';
import type { FireBatchResult } from '../../ledger/fire-ledger.js';
import { SpanAttr, traceparentOf, tracer } from '../../tracing.js';

/**
 * One commit of fires, traced: a span for the fenced transaction and, under it, one producer span
 * per committed fire whose context the fire carries to the queue (`traceparent`), so the attempt
 * that runs it continues the same trace. Without an SDK the spans do not record and nothing per
 * fire is done.
 */
export async function tracedFireCommit(
  leader: { token: bigint; replicaId: string; fires: number },
  commit: () => Promise<FireBatchResult>,
): Promise<FireBatchResult> {
  const span = tracer.startSpan('cronwarden.fire.commit', {
    attributes: {
      [SpanAttr.leaderToken]: leader.token.toString(),
      [SpanAttr.replica]: leader.replicaId,
      [SpanAttr.fires]: leader.fires,
    },
  });
  let result: FireBatchResult;
  try {
    result = await commit();
  } catch (err) {
    span.setAttribute(SpanAttr.outcome, err instanceof StaleTokenError ? 'refused' : 'failed');
    span.recordException(err as Error);
    span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
    span.end();
    throw err;
  }
  span.setAttributes({ [SpanAttr.outcome]: 'committed', 'cronwarden.duplicates': result.duplicates });
  if (span.isRecording()) {
    const parent = trace.setSpan(context.active(), span);
    for (const fire of result.committed) {
      const child = tracer.startSpan(
        'cronwarden.fire',
        {
          kind: SpanKind.PRODUCER,
          attributes: {
            [SpanAttr.job]: fire.job,
            [SpanAttr.runId]: fire.runId.toString(),
            [SpanAttr.trigger]: fire.trigger,
            [SpanAttr.scheduledAt]: fire.scheduledAt.toISOString(),
            [SpanAttr.leaderToken]: leader.token.toString(),
            [SpanAttr.outcome]: fire.state,
          },
        },
        parent,
      );
      fire.traceparent = traceparentOf(child);
      child.end();
    }
  }
  span.end();
  return result;
}
