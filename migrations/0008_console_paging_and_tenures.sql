ALTER TABLE "cw_elections" ADD COLUMN "renewed_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "cw_elections" ADD COLUMN "released_at" timestamp with time zone;--> statement-breakpoint
CREATE INDEX "cw_runs_scheduled_id" ON "cw_runs" USING btree ("scheduled_at","id");--> statement-breakpoint
CREATE INDEX "cw_runs_job_scheduled_id" ON "cw_runs" USING btree ("job","scheduled_at","id");