CREATE TABLE "cw_workers" (
	"worker" text PRIMARY KEY NOT NULL,
	"beat_at" timestamp with time zone DEFAULT now() NOT NULL,
	"started_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "claimed_by" text;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "failures" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "available_at" timestamp with time zone;