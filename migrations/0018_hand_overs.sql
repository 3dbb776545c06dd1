CREATE TABLE "cw_hand_overs" (
	"run_id" bigint PRIMARY KEY NOT NULL
);
