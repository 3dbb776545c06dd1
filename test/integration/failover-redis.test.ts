import { it } from 'node:test';
import assert from 'node:assert/strict';
import { runFailoverScenario, SHARED_REDIS_URL } from './failover-scenario.js';

it(
  'redis backend: three replicas, graceful and abrupt leader stops, exactly one run per second',
  { timeout: 180_000 },
  async () => {
    const report = await runFailoverScenario(() => ({ kind: 'redis', url: SHARED_REDIS_URL }));
    console.log('redis failover:', JSON.stringify(report));
    assert.ok(report.runs >= 90);
  },
);
