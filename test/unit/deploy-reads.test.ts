/**
 * The deploy files put the admin API's reads behind the token wherever they bind it beyond
 * loopback (issue 25, item 12): a handler's error text is served to whoever reads.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';

const deploy = (file: string) => readFileSync(new URL(`../../deploy/${file}`, import.meta.url), 'utf8');
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '::1']);

it('kubernetes.yaml binds the pod network and sets CRONWARDEN_ADMIN_READS_NEED_TOKEN=true', () => {
  type Env = { name: string; value?: string }[];
  type Pod = { spec?: { template?: { spec?: { containers?: { name: string; env?: Env }[] } } } };
  const containers = parseAllDocuments(deploy('kubernetes.yaml'))
    .map((d) => d.toJS() as Pod)
    .flatMap((doc) => doc?.spec?.template?.spec?.containers ?? []);
  const bound = containers.filter((c) => {
    const host = c.env?.find((e) => e.name === 'CRONWARDEN_ADMIN_HOST')?.value;
    return host !== undefined && !LOOPBACK.has(host);
  });
  assert.ok(bound.length > 0, 'a container binds beyond loopback');
  for (const c of bound)
    assert.equal(c.env!.find((e) => e.name === 'CRONWARDEN_ADMIN_READS_NEED_TOKEN')?.value, 'true', c.name);
});

it('cronwarden.env keeps the admin API on loopback, and says to set reads-need-token beyond it', () => {
  const text = deploy('cronwarden.env');
  const host = /^CRONWARDEN_ADMIN_HOST=(.*)$/m.exec(text)?.[1];
  if (host !== undefined && !LOOPBACK.has(host)) assert.match(text, /^CRONWARDEN_ADMIN_READS_NEED_TOKEN=true$/m);
  else assert.match(text, /^#CRONWARDEN_ADMIN_READS_NEED_TOKEN=true$/m);
});
