/**
 * Text a handler controls (an error's message and stack) is stored bounded and sanitised: PostgreSQL
 * refuses U+0000 in text ("invalid byte sequence for encoding UTF8: 0x00"), which once left a run
 * `running` for ever, an unbounded message let one admin request return hundreds of megabytes, and
 * an error that printed a database URL served its password to every reader of the admin API
 * (credentials are masked as the configuration's URLs are in logs: src/redact.ts).
 */
import { maskCredentials } from '../redact.js';

/** Longest error message kept, in characters. */
export const MAX_ERROR_MESSAGE = 2000;
/** Longest stack kept, in characters. */
export const MAX_ERROR_STACK = 8000;

/** `text` without NUL characters or credentials, cut to `max` characters with a note of how much was cut. */
export function storableText(text: string, max: number): string {
  const clean = maskCredentials(text.replaceAll('\u0000', '\\0'));
  if (clean.length <= max) return clean;
  const note = `… [${clean.length - max} more characters]`;
  return clean.slice(0, Math.max(0, max - note.length)) + note;
}

export interface StoredError {
  message: string;
  stack: string | null;
}

/** What the ledger keeps of an error (or of a plain reason string). */
export function storedError(error: unknown): StoredError {
  if (typeof error === 'string') return { message: storableText(error, MAX_ERROR_MESSAGE), stack: null };
  if (error instanceof Error) {
    const stack = typeof error.stack === 'string' ? storableText(error.stack, MAX_ERROR_STACK) : null;
    return {
      message: storableText(
        safeString(() => error.message),
        MAX_ERROR_MESSAGE,
      ),
      stack,
    };
  }
  return {
    message: storableText(
      safeString(() => String(error)),
      MAX_ERROR_MESSAGE,
    ),
    stack: null,
  };
}

/** A handler can throw anything, even a value whose toString throws. */
function safeString(read: () => unknown): string {
  try {
    const value = read();
    return typeof value === 'string' ? value : String(value);
  } catch {
    return '(an error whose message could not be read)';
  }
}
