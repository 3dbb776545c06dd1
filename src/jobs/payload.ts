/**
 * What a caller's payload (a runtime schedule's, a one-off run's) and one-off key must be for the
 * ledger to keep them as given. PostgreSQL refuses U+0000 in text and in jsonb (22021, 22P05) and
 * a lone surrogate in jsonb (22P02); JSON.stringify writes a non-finite number (1e400 parses as
 * Infinity) as null; a value nested thousands deep overflows the stack of whatever walks it next.
 * Each is refused here, before anything is written, with a message naming what is wrong.
 */
import { z } from 'zod';

/** Largest payload accepted, as JSON text. */
export const MAX_PAYLOAD_BYTES = 8 * 1024;
/** Deepest nesting of arrays and objects a payload may have. */
export const MAX_PAYLOAD_DEPTH = 32;
/** Longest one-off key accepted (characters). */
export const MAX_ONCE_KEY = 200;

/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const SURROGATE_MESSAGE = 'must not contain a lone UTF-16 surrogate (not valid Unicode)';

/** Why `s` cannot be stored as text, or undefined when it can. */
export function textProblem(s: string): string | undefined {
  if (s.includes('\u0000')) return 'must not contain the NUL character (U+0000)';
  if (LONE_SURROGATE.test(s)) return SURROGATE_MESSAGE;
  return undefined;
}

/** Why `value` cannot be stored as a payload, or undefined when it can. */
export function payloadProblem(value: unknown): string | undefined {
  const problem = walk(value, 0);
  if (problem) return problem;
  if (JSON.stringify(value ?? null).length > MAX_PAYLOAD_BYTES)
    return `must be at most ${MAX_PAYLOAD_BYTES} bytes of JSON`;
  return undefined;
}

/** Depth first, stopping at the first problem; never deeper than MAX_PAYLOAD_DEPTH + 1 frames. */
function walk(value: unknown, depth: number): string | undefined {
  if (typeof value === 'number')
    return Number.isFinite(value) ? undefined : `must hold only finite numbers (got ${value})`;
  if (typeof value === 'string') return textProblem(value);
  if (typeof value !== 'object' || value === null) return undefined;
  if (depth >= MAX_PAYLOAD_DEPTH) return `must be nested at most ${MAX_PAYLOAD_DEPTH} levels deep`;
  const entries: [string | undefined, unknown][] = Array.isArray(value)
    ? value.map((v) => [undefined, v])
    : Object.entries(value);
  for (const [key, v] of entries) {
    const problem = (key === undefined ? undefined : textProblem(key)) ?? walk(v, depth + 1);
    if (problem) return problem;
  }
  return undefined;
}

/** A payload in a zod schema: any JSON the ledger can keep as given. */
export const payloadSchema = z.unknown().superRefine((v, ctx) => {
  const problem = payloadProblem(v);
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
});

/** A one-off run's key: 1-200 characters of valid Unicode without control characters. */
export const onceKeySchema = z
  .string('must be a string')
  .min(1, 'must not be empty')
  .max(MAX_ONCE_KEY, `must be at most ${MAX_ONCE_KEY} characters`)
  // eslint-disable-next-line no-control-regex
  .regex(/^[^\u0000-\u001f\u007f-\u009f]*$/, 'must not contain control characters')
  .refine((s) => !LONE_SURROGATE.test(s), SURROGATE_MESSAGE);
