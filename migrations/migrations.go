// Package migrations holds batchq's schema as goose SQL migrations, embedded
// in the binary, and applies them with the SQL functions of db/functions.
//
// The files are append-only and zero-padded (00001_schema.sql, ...); those a
// release shipped are never edited (RELEASED lists their checksums). batchq
// records what it applied in its own version table, TableName, and takes a
// Postgres session advisory lock, LockID, while it migrates, so it never
// collides with an application that runs its own goose migrations in the same
// database.
//
// Migrations hold the schema; the text of every function lives in one file
// of db/functions. Up applies the pending migrations and then, whenever their
// text changed, the function files, in one transaction, under the same lock:
// it is what `batchq migrate up` runs. Applications that run goose themselves
// can use FS with TableName and a session lock on LockID, then call
// ApplyFunctions (or run the script FunctionsSQL returns, which `batchq
// migrate get --functions` prints).
package migrations

import (
	"database/sql"
	"embed"
	"fmt"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// FS holds the migration files, at its root.
//
//go:embed *.sql
var FS embed.FS

// TableName is the goose version table batchq keeps its history in.
const TableName = "batchq_goose_db_version"

// LockID is the key of the session advisory lock held while migrating: the
// ASCII bytes of "batchq", distinct from goose's default lock.
const LockID int64 = 0x626174636871

// NewProvider returns a goose provider over FS that uses TableName and a
// session lock on LockID: the migrations alone, without the function files
// (see Up). db must be a Postgres database/sql handle (for pgx,
// github.com/jackc/pgx/v5/stdlib).
func NewProvider(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(LockID))
	if err != nil {
		return nil, fmt.Errorf("batchq: migration lock: %w", err)
	}
	opts = append([]goose.ProviderOption{
		goose.WithTableName(TableName),
		goose.WithSessionLocker(locker),
	}, opts...)
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS, opts...)
	if err != nil {
		return nil, fmt.Errorf("batchq: migrations: %w", err)
	}
	return p, nil
}
