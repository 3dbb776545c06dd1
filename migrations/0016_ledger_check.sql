CREATE TABLE "cw_ledger_checks" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"checked_at" timestamp with time zone DEFAULT now() NOT NULL,
	"report" jsonb NOT NULL
);
--> statement-breakpoint
ALTER TABLE "cw_members" ADD COLUMN "lost_writes" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "cw_members" ADD COLUMN "lost_writes_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "cw_members" ADD COLUMN "lost_write_example" text;