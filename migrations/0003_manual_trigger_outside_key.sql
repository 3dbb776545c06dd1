DROP INDEX "cw_runs_job_scheduled_at";--> statement-breakpoint
CREATE UNIQUE INDEX "cw_runs_job_scheduled_at" ON "cw_runs" USING btree ("job","scheduled_at") WHERE "cw_runs"."trigger" <> 'manual';