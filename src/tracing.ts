/**
 * OpenTelemetry tracing through the API package only: spans go to whatever SDK the application
 * registers (NodeSDK, a BasicTracerProvider, …); with none, every call here is the API's no-op and
 * costs a few property reads. The fire commit's context travels to the attempt inside the queued
 * job as a W3C `traceparent` string, written and read here, so it needs no propagator either.
 */
import {
  context,
  isSpanContextValid,
  trace,
  TraceFlags,
  type Context,
  type Span,
  type SpanContext,
} from '@opentelemetry/api';

/** The tracer every cronwarden span comes from (a proxy: an SDK registered later still gets them). */
export const tracer = trace.getTracer('cronwarden');

/** Span attribute names, one place. */
export const SpanAttr = {
  job: 'cronwarden.job',
  runId: 'cronwarden.run_id',
  trigger: 'cronwarden.trigger',
  scheduledAt: 'cronwarden.scheduled_at',
  leaderToken: 'cronwarden.leader_token',
  executionToken: 'cronwarden.execution_token',
  attempt: 'cronwarden.attempt',
  replica: 'cronwarden.replica',
  outcome: 'cronwarden.outcome',
  fires: 'cronwarden.fires',
} as const;

/** The span's context as a W3C traceparent, or undefined when nothing records it (no SDK). */
export function traceparentOf(span: Span): string | undefined {
  const sc = span.spanContext();
  if (!isSpanContextValid(sc)) return undefined;
  const flags = (sc.traceFlags & TraceFlags.SAMPLED).toString(16).padStart(2, '0');
  return `00-${sc.traceId}-${sc.spanId}-${flags}`;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** A context whose parent is the remote span `traceparent` names; the active one if it is absent or malformed. */
export function contextFrom(traceparent: string | undefined): Context {
  const m = traceparent === undefined ? null : TRACEPARENT.exec(traceparent);
  if (!m) return context.active();
  const sc: SpanContext = { traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16), isRemote: true };
  return isSpanContextValid(sc) ? trace.setSpanContext(context.active(), sc) : context.active();
}
