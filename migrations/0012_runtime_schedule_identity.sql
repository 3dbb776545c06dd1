ALTER TABLE "cw_job_state" ADD COLUMN "schedule_id" text GENERATED ALWAYS AS (CASE WHEN strpos(job, '/') > 0 AND job NOT LIKE 'node-cron:%' THEN substr(job, strpos(job, '/') + 1) END) STORED;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "schedule_id" text GENERATED ALWAYS AS (CASE WHEN strpos(job, '/') > 0 AND job NOT LIKE 'node-cron:%' THEN substr(job, strpos(job, '/') + 1) END) STORED;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "duplicate_of" bigint;--> statement-breakpoint
CREATE INDEX "cw_job_state_schedule_id" ON "cw_job_state" USING btree ("schedule_id");--> statement-breakpoint
-- A ledger from before this migration may hold a runtime schedule's slot twice, under two handlers' names
-- (issue 25). Both runs stay as they were; the later ones are marked, so that the schedule's key can be built.
UPDATE "cw_runs" AS r SET "duplicate_of" = d.first
FROM (SELECT id, min(id) OVER (PARTITION BY schedule_id, scheduled_at) AS first FROM "cw_runs"
      WHERE schedule_id IS NOT NULL AND trigger NOT IN ('manual', 'once')) AS d
WHERE r.id = d.id AND d.id <> d.first;--> statement-breakpoint
CREATE UNIQUE INDEX "cw_runs_schedule_slot" ON "cw_runs" USING btree ("schedule_id","scheduled_at") WHERE "cw_runs"."schedule_id" IS NOT NULL AND "cw_runs"."trigger" NOT IN ('manual', 'once') AND "cw_runs"."duplicate_of" IS NULL;