package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/batchq/batchq/db/functions"
)

// FunctionsSince is the first migration after which the function files of
// db/functions hold the functions' text. Below it, the migrations of release
// 0.1.0 hold them.
const FunctionsSince int64 = 6

// Result says what Up, UpTo or DownTo did.
type Result struct {
	// Migrations are the migrations applied or reverted, in order.
	Migrations []*goose.MigrationResult
	// Functions are the function files applied, in order: every file when
	// any changed since they were last applied, none when none did.
	Functions []string
	// Version is the schema version the database is at now.
	Version int64
}

// Up applies every pending migration, then the function files when their
// text differs from what the database last applied, all while holding the
// migration lock (LockID). It is what `batchq migrate up` runs; running it
// again changes nothing.
func Up(ctx context.Context, db *sql.DB) (*Result, error) {
	return UpTo(ctx, db, goose.MaxVersion)
}

// UpTo is Up that stops at version. The function files are applied only once
// the database is at the latest version: they are written for it.
func UpTo(ctx context.Context, db *sql.DB, version int64) (*Result, error) {
	return locked(ctx, db, func(conn *sql.Conn, p *goose.Provider) (*Result, error) {
		if err := checkCanMigrate(ctx, conn); err != nil {
			return nil, err
		}
		granted, err := functionGrants(ctx, conn)
		if err != nil {
			return nil, err
		}
		res := &Result{}
		if version == goose.MaxVersion {
			res.Migrations, err = p.Up(ctx)
		} else {
			res.Migrations, err = p.UpTo(ctx, version)
		}
		if err != nil && !errors.Is(err, goose.ErrNoNextVersion) {
			return partial(ctx, p, res, "migrate up", err)
		}
		if res.Version, err = p.GetDBVersion(ctx); err != nil {
			return nil, fmt.Errorf("batchq: schema version: %w", err)
		}
		if res.Version == latest(p) {
			if res.Functions, err = applyFunctions(ctx, conn); err != nil {
				return res, err
			}
		}
		if err := regrantFunctions(ctx, conn, granted); err != nil {
			return res, err
		}
		return res, nil
	})
}

// functionGrant is a role's right to call the batchq functions of a name.
type functionGrant struct{ function, role string }

// functionGrants returns who, besides their owner, may call batchq's
// functions now, by name (none before the schema exists).
func functionGrants(ctx context.Context, conn *sql.Conn) ([]functionGrant, error) {
	rows, err := conn.QueryContext(ctx, functionGrantsSQL)
	if err != nil {
		return nil, fmt.Errorf("batchq: migrate: read function grants: %w", err)
	}
	defer rows.Close()
	var out []functionGrant
	for rows.Next() {
		var g functionGrant
		if err := rows.Scan(&g.function, &g.role); err != nil {
			return nil, fmt.Errorf("batchq: migrate: read function grants: %w", err)
		}
		out = append(out, g)
	}
	return out, rows.Err()
}

// regrantFunctions grants each role again the right to call the functions
// it could call before migrating, under their names: a migration that drops
// a function to change its arguments, and the file that creates it anew,
// must not take away an application's right to enqueue. It grants nothing
// new: a function a role could not call stays so, and a role the grants
// script made for a later version's new functions is run again for them.
func regrantFunctions(ctx context.Context, conn *sql.Conn, granted []functionGrant) error {
	if len(granted) == 0 {
		return nil
	}
	names, roles := make([]string, len(granted)), make([]string, len(granted))
	for i, g := range granted {
		names[i], roles[i] = g.function, g.role
	}
	rows, err := conn.QueryContext(ctx, regrantFunctionsSQL, names, roles)
	if err != nil {
		return fmt.Errorf("batchq: migrate: grant the functions again: %w", err)
	}
	var grants []string
	for rows.Next() {
		var stmt string
		if err := rows.Scan(&stmt); err != nil {
			rows.Close()
			return fmt.Errorf("batchq: migrate: grant the functions again: %w", err)
		}
		grants = append(grants, stmt)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("batchq: migrate: grant the functions again: %w", err)
	}
	for _, stmt := range grants {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("batchq: migrate: %s: %w", stmt, err)
		}
	}
	return nil
}

// DownTo reverts migrations down to version, which stays applied. Going
// below FunctionsSince restores the functions of release 0.1.0 (migration
// 00006's Down does). Stopping at or above it, between two releases, leaves
// the functions of the latest version in place and forgets that they were
// applied, so the next Up applies them again.
func DownTo(ctx context.Context, db *sql.DB, version int64) (*Result, error) {
	return locked(ctx, db, func(conn *sql.Conn, p *goose.Provider) (*Result, error) {
		res := &Result{}
		var err error
		res.Migrations, err = p.DownTo(ctx, version)
		if err != nil && !errors.Is(err, goose.ErrNoNextVersion) {
			return partial(ctx, p, res, "migrate down", err)
		}
		if res.Version, err = p.GetDBVersion(ctx); err != nil {
			return nil, fmt.Errorf("batchq: schema version: %w", err)
		}
		if res.Version >= FunctionsSince && len(res.Migrations) > 0 {
			if _, err := conn.ExecContext(ctx, forgetFunctionsSQL); err != nil {
				return res, fmt.Errorf("batchq: migrate down: %w", err)
			}
		}
		return res, nil
	})
}

// partial returns what a run that failed with err did: the migrations goose
// applied or reverted before the one that failed, each in its own
// transaction, and the version that left, when it can be read; nil when
// nothing is known. The error names the migration that failed, in words.
func partial(ctx context.Context, p *goose.Provider, res *Result, what string, err error) (*Result, error) {
	var pe *goose.PartialError
	if !errors.As(err, &pe) {
		return nil, fmt.Errorf("batchq: %s: %w", what, err)
	}
	res.Migrations = pe.Applied
	err = fmt.Errorf("batchq: %s: %s: %w", what, path.Base(pe.Failed.Source.Path), pe.Err)
	v, verr := p.GetDBVersion(ctx)
	if verr != nil {
		res.Migrations, res.Version = nil, 0
		return nil, err
	}
	res.Version = v
	return res, err
}

// objectsSQL says whether schema batchq holds a table, view, sequence,
// function or type; versionSQL whether batchq's version table records a
// migration (false when there is no such table).
const (
	objectsSQL = `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE relnamespace = to_regnamespace('batchq'))
    OR EXISTS (SELECT 1 FROM pg_catalog.pg_proc WHERE pronamespace = to_regnamespace('batchq'))
    OR EXISTS (SELECT 1 FROM pg_catalog.pg_type WHERE typnamespace = to_regnamespace('batchq'))`
	versionTableSQL = `SELECT to_regclass($1) IS NOT NULL`
	recordedSQL     = `SELECT EXISTS (SELECT 1 FROM ` + TableName + ` WHERE version_id > 0)`
	// Whether the role may create batchq's schema (when it is missing) and
	// the version table (when it is missing, in the schema it would go to).
	rightsSQL = `SELECT current_user::text, coalesce(current_schema()::text, ''),
    to_regnamespace('batchq') IS NOT NULL OR has_database_privilege(current_database(), 'CREATE'),
    to_regclass($1) IS NOT NULL OR (current_schema() IS NOT NULL AND has_schema_privilege(current_schema(), 'CREATE'))`
)

// checkCanMigrate refuses, before anything is written, a database that
// migrate up would break or fail on half-way: one whose schema batchq holds
// objects none of batchq's recorded migrations made (another program's
// schema of that name: the first migration would be recorded as applied to
// it, and reverting it drops the schema), and a role that may not create
// the schema or the version table.
func checkCanMigrate(ctx context.Context, conn *sql.Conn) error {
	var hasObjects, hasTable, recorded bool
	if err := conn.QueryRowContext(ctx, objectsSQL).Scan(&hasObjects); err != nil {
		return fmt.Errorf("batchq: migrate up: %w", err)
	}
	if err := conn.QueryRowContext(ctx, versionTableSQL, TableName).Scan(&hasTable); err != nil {
		return fmt.Errorf("batchq: migrate up: %w", err)
	}
	if hasTable {
		if err := conn.QueryRowContext(ctx, recordedSQL).Scan(&recorded); err != nil {
			return fmt.Errorf("batchq: migrate up: %s: %w", TableName, err)
		}
	}
	if hasObjects && !recorded {
		return fmt.Errorf("batchq: migrate up: schema batchq already holds tables or functions, and %s records no "+
			"batchq migration: it belongs to another program, or was migrated by another tool with a version table of "+
			"its own; nothing was changed", TableName)
	}
	var role, schema string
	var mayCreateSchema, mayCreateTable bool
	if err := conn.QueryRowContext(ctx, rightsSQL, TableName).Scan(&role, &schema, &mayCreateSchema, &mayCreateTable); err != nil {
		return fmt.Errorf("batchq: migrate up: %w", err)
	}
	switch {
	case schema == "" && !hasTable:
		return fmt.Errorf("batchq: migrate up: role %s has no schema on its search_path to keep the version table %s in; "+
			"nothing was changed", role, TableName)
	case !mayCreateTable:
		return fmt.Errorf("batchq: migrate up: role %s may not create the version table %s in schema %s (it lacks CREATE "+
			"there): grant it, or migrate as the database's owner; nothing was changed", role, TableName, schema)
	case !mayCreateSchema:
		return fmt.Errorf("batchq: migrate up: role %s may not create schema batchq (it lacks CREATE on the database): "+
			"grant it, or migrate as the database's owner; nothing was changed", role)
	}
	return nil
}

// ApplyFunctions applies the function files when their text differs from
// what the database last applied, holding the migration lock. Applications
// that run goose over FS themselves call it after migrating to the latest
// version; Up does both.
func ApplyFunctions(ctx context.Context, db *sql.DB) ([]string, error) {
	res, err := locked(ctx, db, func(conn *sql.Conn, p *goose.Provider) (*Result, error) {
		v, err := p.GetDBVersion(ctx)
		if err != nil {
			return nil, fmt.Errorf("batchq: schema version: %w", err)
		}
		if v != latest(p) {
			return nil, fmt.Errorf("batchq: apply functions: the schema is at version %d, not %d: migrate up first", v, latest(p))
		}
		files, err := applyFunctions(ctx, conn)
		return &Result{Functions: files, Version: v}, err
	})
	if res == nil {
		return nil, err
	}
	return res.Functions, err
}

// FunctionsSQL returns the function files as one script, in the order they
// are applied, for those who apply the schema with their own tooling (run
// it in one transaction after migrating).
func FunctionsSQL() (string, error) {
	var b strings.Builder
	for _, name := range functions.Files {
		text, err := fs.ReadFile(functions.FS, name)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "-- db/functions/%s\n%s\n", name, text)
	}
	return b.String(), nil
}

// locked runs fn with the migration lock held on conn, and a provider that
// does not take it again.
func locked(ctx context.Context, db *sql.DB, fn func(*sql.Conn, *goose.Provider) (*Result, error)) (*Result, error) {
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(LockID))
	if err != nil {
		return nil, fmt.Errorf("batchq: migration lock: %w", err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("batchq: migrate: %w", err)
	}
	defer conn.Close()
	if err := locker.SessionLock(ctx, conn); err != nil {
		return nil, fmt.Errorf("batchq: migration lock: %w", err)
	}
	defer func() { _ = locker.SessionUnlock(context.WithoutCancel(ctx), conn) }()
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS, goose.WithTableName(TableName))
	if err != nil {
		return nil, fmt.Errorf("batchq: migrations: %w", err)
	}
	return fn(conn, p)
}

func latest(p *goose.Provider) int64 {
	srcs := p.ListSources()
	return srcs[len(srcs)-1].Version
}

// The bookkeeping of applyFunctions and DownTo, on batchq.function_files,
// and of the function grants Up keeps.
const (
	functionGrantsSQL = `SELECT DISTINCT p.proname::text, r.rolname::text
FROM pg_catalog.pg_proc p
CROSS JOIN LATERAL aclexplode(p.proacl) a
JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
WHERE p.pronamespace = to_regnamespace('batchq') AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
ORDER BY 1, 2`
	// The GRANT statements that give each role of $2 EXECUTE on the
	// functions named by the same element of $1 that it may not call.
	regrantFunctionsSQL = `SELECT format('GRANT EXECUTE ON FUNCTION %s TO %I', p.oid::regprocedure, g.role)
FROM unnest($1::text[], $2::text[]) AS g (name, role)
JOIN pg_catalog.pg_proc p ON p.pronamespace = 'batchq'::regnamespace AND p.proname = g.name
WHERE NOT has_function_privilege(g.role, p.oid, 'EXECUTE')`
	appliedFunctionsSQL = `SELECT name, sha256 FROM batchq.function_files`
	forgetFunctionsSQL  = `DELETE FROM batchq.function_files`
	recordFunctionSQL   = `INSERT INTO batchq.function_files (name, sha256) VALUES ($1, $2)`
	// Functions in the schema that no file created or replaced in this
	// transaction: left over from an older text, with arguments or a result
	// that changed. A migration must drop them.
	staleFunctionsSQL = `SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
WHERE p.pronamespace = 'batchq'::regnamespace AND p.xmin::text::bigint <> txid_current() % 4294967296
ORDER BY 1`
)

// applyFunctions applies every function file, in one transaction on conn,
// when any differs from what was applied last, and returns the files it
// applied.
func applyFunctions(ctx context.Context, conn *sql.Conn) ([]string, error) {
	want := map[string]string{}
	for _, name := range functions.Files {
		text, err := fs.ReadFile(functions.FS, name)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(text)
		want[name] = hex.EncodeToString(sum[:])
	}
	have, err := appliedFunctions(ctx, conn)
	if err != nil {
		return nil, err
	}
	if sameSums(want, have) {
		return nil, nil
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("batchq: apply functions: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	for _, name := range functions.Files {
		text, _ := fs.ReadFile(functions.FS, name)
		if _, err := tx.ExecContext(ctx, string(text)); err != nil {
			return nil, fmt.Errorf("batchq: apply functions: db/functions/%s: %w", name, err)
		}
	}
	stale, err := staleFunctions(ctx, tx)
	if err != nil {
		return nil, err
	}
	if len(stale) > 0 {
		return nil, fmt.Errorf("batchq: apply functions: no file defines %s: drop them in a migration", strings.Join(stale, ", "))
	}
	if _, err := tx.ExecContext(ctx, forgetFunctionsSQL); err != nil {
		return nil, fmt.Errorf("batchq: apply functions: %w", err)
	}
	for _, name := range functions.Files {
		if _, err := tx.ExecContext(ctx, recordFunctionSQL, name, want[name]); err != nil {
			return nil, fmt.Errorf("batchq: apply functions: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("batchq: apply functions: %w", err)
	}
	return functions.Files, nil
}

func appliedFunctions(ctx context.Context, conn *sql.Conn) (map[string]string, error) {
	rows, err := conn.QueryContext(ctx, appliedFunctionsSQL)
	if err != nil {
		return nil, fmt.Errorf("batchq: applied functions: %w", err)
	}
	defer rows.Close()
	have := map[string]string{}
	for rows.Next() {
		var name, sum string
		if err := rows.Scan(&name, &sum); err != nil {
			return nil, err
		}
		have[name] = sum
	}
	return have, rows.Err()
}

func staleFunctions(ctx context.Context, tx *sql.Tx) ([]string, error) {
	rows, err := tx.QueryContext(ctx, staleFunctionsSQL)
	if err != nil {
		return nil, fmt.Errorf("batchq: apply functions: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var f string
		if err := rows.Scan(&f); err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

func sameSums(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
