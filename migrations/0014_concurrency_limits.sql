CREATE TABLE "cw_limit_slots" (
	"key" text NOT NULL,
	"slot" integer NOT NULL,
	"run_id" bigint,
	"token" bigint,
	"worker" text,
	"taken_at" timestamp with time zone,
	CONSTRAINT "cw_limit_slots_key_slot_pk" PRIMARY KEY("key","slot")
);
--> statement-breakpoint
ALTER TABLE "cw_runs" ADD COLUMN "limit_key" text;--> statement-breakpoint
CREATE INDEX "cw_runs_limit_waiting" ON "cw_runs" USING btree ("limit_key","scheduled_at","id") WHERE "cw_runs"."limit_key" IS NOT NULL AND "cw_runs"."state" IN ('pending', 'retrying');