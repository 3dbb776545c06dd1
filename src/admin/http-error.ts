import type { z } from 'zod';

/** An answer the admin HTTP gives on purpose: status, a stable code, a message, extra fields. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

/** `value` parsed by `schema`, or a 400 naming the first bad field. */
export function parse<T>(schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value ?? {});
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  throw new HttpError(400, 'bad_request', `${issue.path.join('.') || 'value'}: ${issue.message}`);
}
