// Package pgtest gives each test its own freshly migrated Postgres database,
// cloned from a template, so database tests can call t.Parallel().
//
// The server comes from, in order: TEST_DATABASE_URL; DATABASE_URL; the local
// server at postgres://postgres@127.0.0.1:5432; a Postgres container started
// with testcontainers when a Docker engine answers. When none is reachable, a
// database test fails (never skips) with a message that says how to provide
// one. With `go test -short`, database tests are skipped.
//
// Only *_test.go files import this package.
package pgtest

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver pgtestdb opens
	"github.com/peterldowns/pgtestdb"

	"github.com/batchq/batchq/db/functions"
	"github.com/batchq/batchq/migrations"
)

// LocalURL is the server tried when neither TEST_DATABASE_URL nor
// DATABASE_URL is set.
const LocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

const howTo = `pgtest: no Postgres server for the database tests.
  Set TEST_DATABASE_URL (or DATABASE_URL) to a server where this user may create databases,
  or run PostgreSQL on 127.0.0.1:5432 (Debian: apt-get install postgresql; pg_ctlcluster 15 main start),
  or start a Docker engine so a Postgres container can be used.
  Run 'go test -short ./...' to skip the database tests.`

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error
)

// ServerURL returns the URL of the server the tests use, as its superuser or
// whatever role the URL names. It fails tb when no server is reachable and
// skips it in -short mode.
func ServerURL(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("pgtest: database test skipped in -short mode")
	}
	serverOnce.Do(func() { serverURL, serverErr = findServer(context.Background()) })
	if serverErr != nil {
		tb.Fatalf("%v\n%s", serverErr, howTo)
	}
	return serverURL
}

func findServer(ctx context.Context) (string, error) {
	for _, env := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if u := os.Getenv(env); u != "" {
			// A server named explicitly is the one to use; falling back would
			// test against something the user did not ask for.
			if err := ping(ctx, u); err != nil {
				return "", fmt.Errorf("pgtest: %s is set but does not answer: %w", env, err)
			}
			return u, nil
		}
	}
	localErr := ping(ctx, LocalURL)
	if localErr == nil {
		return LocalURL, nil
	}
	u, dockerErr := startContainer(ctx)
	if dockerErr == nil {
		return u, nil
	}
	return "", fmt.Errorf("pgtest: %s: %v; testcontainers: %v", LocalURL, localErr, dockerErr)
}

func ping(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// URL returns the connection URL of a new database, migrated to the latest
// version and dropped when the test ends.
func URL(tb testing.TB) string {
	tb.Helper()
	return config(tb).URL()
}

// New returns a pool connected to a new, migrated database that is dropped
// when the test ends. The pool is closed first.
func New(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return Connect(tb, URL(tb))
}

// Connect returns a pool for url that is closed when the test ends.
func Connect(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// EmptyURL returns the connection URL of a new database with no migrations
// applied, dropped when the test ends: for testing migrations themselves.
func EmptyURL(tb testing.TB) string {
	tb.Helper()
	return configWith(tb, pgtestdb.NoopMigrator{}).URL()
}

func config(tb testing.TB) *pgtestdb.Config {
	tb.Helper()
	return configWith(tb, migrator{})
}

func configWith(tb testing.TB, m pgtestdb.Migrator) *pgtestdb.Config {
	tb.Helper()
	u, err := url.Parse(ServerURL(tb))
	if err != nil {
		tb.Fatalf("pgtest: server URL: %v", err)
	}
	pw, _ := u.User.Password()
	conf := pgtestdb.Config{
		DriverName:                "pgx",
		Host:                      u.Hostname(),
		Port:                      u.Port(),
		User:                      u.User.Username(),
		Password:                  pw,
		Database:                  trimSlash(u.Path),
		Options:                   u.RawQuery,
		ForceTerminateConnections: true,
	}
	if conf.Port == "" {
		conf.Port = "5432"
	}
	if conf.Database == "" {
		conf.Database = "postgres"
	}
	return pgtestdb.Custom(tb, conf, m)
}

func trimSlash(p string) string {
	if len(p) > 0 && p[0] == '/' {
		return p[1:]
	}
	return p
}

// migrator applies migrations.Up: the migrations, then the function files.
// Its hash names the template database, so a change to any migration or
// function file builds a new template.
type migrator struct{}

func (migrator) Hash() (string, error) {
	h := sha256.New()
	for _, fsys := range []fs.FS{migrations.FS, functions.FS} {
		names, err := fs.Glob(fsys, "*.sql")
		if err != nil {
			return "", err
		}
		sort.Strings(names)
		for _, n := range names {
			b, err := fs.ReadFile(fsys, n)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
			h.Write(b)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func (migrator) Migrate(ctx context.Context, db *sql.DB, _ pgtestdb.Config) error {
	_, err := migrations.Up(ctx, db)
	return err
}
