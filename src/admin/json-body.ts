/**
 * The admin HTTP's JSON body parser: fastify's own (secure-json-parse, which refuses __proto__
 * and constructor.prototype keys), behind a depth check on the raw text. A body nested a few
 * thousand deep parses, but whatever walks it next (validation, the structured clone to the main
 * thread, JSON.stringify for the ledger) overflows its stack: a 500, or a thread that stops
 * answering. Counting brackets is one pass over at most the body limit, before any of that.
 */
import type { FastifyInstance } from 'fastify';
import { MAX_PAYLOAD_DEPTH } from '../jobs/payload.js';
import { HttpError } from './http-error.js';

/** Deepest body accepted: a payload at its deepest, inside the request object. */
export const MAX_BODY_DEPTH = MAX_PAYLOAD_DEPTH + 1;

/** How deep `text` nests arrays and objects (brackets inside strings do not count). */
export function jsonDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // a backslash escapes the next character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) max = Math.max(max, ++depth);
    else if (c === 0x5d || c === 0x7d) depth--;
  }
  return max;
}

/** Replaces fastify's application/json parser with the same parser behind the depth check. */
export function boundJsonDepth(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    const text = body as string;
    if (jsonDepth(text) > MAX_BODY_DEPTH) {
      return done(
        new HttpError(
          400,
          'bad_request',
          `body: JSON nested deeper than ${MAX_BODY_DEPTH} levels (a payload may nest at most ${MAX_PAYLOAD_DEPTH})`,
        ),
        undefined,
      );
    }
    void parse(req, text, done);
  });
}
