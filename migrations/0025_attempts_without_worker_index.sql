-- The run-attempt metrics are counted by the process that ran the attempts (src/jobs/attempt-metrics.ts),
-- no longer read at each scrape by (worker, finished_at): that index was written by every attempt
-- (88 B of WAL a run of about 1,000) for that read alone. During a rolling upgrade an older replica's
-- scrape still reads its attempts, without the index.
DROP INDEX "cw_run_attempts_worker_finished";
