// Package functions holds the text of batchq's SQL functions: one file per
// concern, each function's current body in exactly one place. Migrations
// hold the schema; migrations.Up applies these files after them, in one
// transaction, whenever their text changed (see README's "Contributing").
// sqlc reads them after the migrations, so the generated code sees the
// functions as they are applied.
package functions

import "embed"

// FS holds the function files, at its root.
//
//go:embed *.sql
var FS embed.FS

// Files lists the files of FS in the order they are applied: a SQL
// function whose body is checked when it is created needs the functions it
// calls to exist already.
var Files = []string{
	"rules.sql",
	"drr.sql",
	"queues.sql",
	"ring.sql",
	"adjustments.sql",
	"rekey.sql",
	"finish.sql",
	"claim.sql",
	"enqueue.sql",
	"maintain.sql",
	"schedules.sql",
	"quota.sql",
	"operate.sql",
	"reports.sql",
	"privileges.sql",
}
