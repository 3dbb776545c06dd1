import type { z } from 'zod';

/** An admin API refusal: the status, a short code and a message, served as JSON. */
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

export function parse<T>(schema: z.ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value ?? {});
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  throw new HttpError(400, 'bad_request', `${issue.path.join('.') || 'value'}: ${issue.message}`);
}
