ALTER TABLE "cw_run_attempts" ADD COLUMN "error_stack" text;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "delivery_checked_at" timestamp with time zone;