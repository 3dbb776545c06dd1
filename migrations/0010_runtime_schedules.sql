CREATE TABLE "cw_schedule_versions" (
	"schedule_id" text NOT NULL,
	"version" integer NOT NULL,
	"action" text NOT NULL,
	"actor" text NOT NULL,
	"effective_at" timestamp with time zone NOT NULL,
	"before" jsonb,
	"after" jsonb,
	CONSTRAINT "cw_schedule_versions_schedule_id_version_pk" PRIMARY KEY("schedule_id","version")
);
--> statement-breakpoint
CREATE TABLE "cw_schedules" (
	"id" text PRIMARY KEY NOT NULL,
	"handler" text NOT NULL,
	"cron" text NOT NULL,
	"timezone" text DEFAULT 'UTC' NOT NULL,
	"misfire" text NOT NULL,
	"overlap" text NOT NULL,
	"catch_up_window_ms" integer NOT NULL,
	"misfire_grace_ms" integer NOT NULL,
	"payload" jsonb,
	"paused" boolean DEFAULT false NOT NULL,
	"version" integer NOT NULL,
	"deleted_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
DROP INDEX "cw_runs_job_scheduled_at";--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "schedule_version" integer;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "payload" jsonb;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "once_key" text;--> statement-breakpoint
CREATE UNIQUE INDEX "cw_runs_job_once_key" ON "cw_runs" USING btree ("job","once_key") WHERE "cw_runs"."once_key" IS NOT NULL;--> statement-breakpoint
CREATE UNIQUE INDEX "cw_runs_job_scheduled_at" ON "cw_runs" USING btree ("job","scheduled_at") WHERE "cw_runs"."trigger" NOT IN ('manual', 'once');