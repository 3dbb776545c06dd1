ALTER TABLE "cw_job_state" ADD COLUMN "paused_reason" text;--> statement-breakpoint
ALTER TABLE "cw_job_state" ADD COLUMN "paused_by" text;--> statement-breakpoint
ALTER TABLE "cw_job_state" ADD COLUMN "paused_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "cw_job_state" ADD COLUMN "paused_until" timestamp with time zone;