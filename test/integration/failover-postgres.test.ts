import { it } from 'node:test';
import assert from 'node:assert/strict';
import { runFailoverScenario } from './failover-scenario.js';

it(
  'postgres backend: three replicas, graceful and abrupt leader stops, exactly one run per second',
  { timeout: 180_000 },
  async () => {
    const report = await runFailoverScenario((databaseUrl) => ({ kind: 'postgres', url: databaseUrl }));
    console.log('postgres failover:', JSON.stringify(report));
    assert.ok(report.runs >= 90);
  },
);
