/**
 * Credentials out of text that is logged, shown or stored: a URL's password (`postgres://app:s3cret@db`
 * → `postgres://app:*****@db`) and libpq's `password=` keyword. The configuration's URLs are masked
 * with it in logs and status output (config/replica-config.ts), and so is a handler's error text
 * before the ledger keeps it, since the admin API serves that text to its readers.
 */

const MASK = '*****';
/** scheme://user:password@ — the password up to the @ (several hosts after it, which URL cannot parse, too). */
const URL_PASSWORD = /\b([a-z][a-z0-9+.-]*:\/\/[^\s:@/?#]*):[^\s@/?#]*@/gi;
/** libpq's key=value form: `host=db password=s3cret`, quoted or not. */
const KEYWORD_PASSWORD = /\b(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'&;]+)/gi;

/** A URL with its password replaced, for logs and status output. */
export function redactUrl(value: string): string {
  try {
    const u = new URL(value);
    if (u.password) u.password = MASK;
    return u.toString();
  } catch {
    // Several hosts (postgres://u:p@h1,h2/db), which URL cannot parse: the password all the same.
    return maskCredentials(value);
  }
}

/** `text` with the password of every URL in it, and every `password=` value, replaced. */
export function maskCredentials(text: string): string {
  return text.replace(URL_PASSWORD, `$1:${MASK}@`).replace(KEYWORD_PASSWORD, `$1${MASK}`);
}
