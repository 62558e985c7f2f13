package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/demo"
	"github.com/batchq/batchq/internal/pgtest"
)

// The demo itself is tested in internal/demo; here, that the command
// rejects bad flags as usage errors naming the flag before it touches a
// database, and documents its flags.
func TestDemoUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--speed", "0"}, "batchq: --speed 0: must be in 0.1..100\n"},
		{[]string{"demo", "--speed", "500"}, "batchq: --speed 500: must be in 0.1..100\n"},
		{[]string{"demo", "--duration", "0s"}, "batchq: --duration 0s: must be in 1s..24h0m0s\n"},
		{[]string{"demo", "--chart", "shares.gif"}, "batchq: --chart \"shares.gif\": must end in .svg or .png\n"},
		{[]string{"demo", "--database-name", "Demo-DB"}, "batchq: --database-name \"Demo-DB\": must be 1-63 characters of a-z, 0-9 and _, not starting with a digit\n"},
		{[]string{"demo", "extra"}, "batchq: demo: unexpected argument \"extra\"\n"},
		{[]string{"demo", "--console-addr", "8080"}, "batchq: --console-addr \"8080\": must be HOST:PORT or :PORT\n"},
		// Its live table, report and chart are for people: no data for JSON or CSV.
		{[]string{"--format", "json", "demo"},
			"batchq: demo: --format json: it prints a live table and a report for people, which are text only; leave --format and BATCHQ_FORMAT unset, or give --format table\n"},
		{[]string{"--format", "csv", "demo"},
			"batchq: demo: --format csv: it prints a live table and a report for people, which are text only; leave --format and BATCHQ_FORMAT unset, or give --format table\n"},
	} {
		// No server answers here: a usage error must come first.
		res := runCLI(t, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", tc.args...)
		require.Equal(t, 2, res.code, "%v: %s", tc.args, res.stderr)
		require.Equal(t, tc.want, res.stderr, "%v", tc.args)
		require.Empty(t, res.stdout)
	}
}

func TestDemoHelp(t *testing.T) {
	t.Parallel()
	res := runCLI(t, "", "demo", "--help")
	require.Equal(t, 0, res.code, res.stderr)
	for _, flag := range []string{"--duration", "--speed", "--chart", "--database-name", "--seed", "--console-addr", "BATCHQ_DEMO_SPEED"} {
		require.Contains(t, res.stdout, flag)
	}
}

// The demo drops its database on every run, so it refuses one that exists
// and that it did not create, before it writes anything; a database it
// created itself it plays in again.
func TestDemoDropsOnlyItsOwnDatabase(t *testing.T) {
	t.Parallel()
	server := pgtest.ServerURL(t)
	if testing.Short() {
		t.Skip("plays the demo twice for a second")
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, server)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(ctx) })
	newName := func() string {
		name := fmt.Sprintf("batchq_cli_demo_test_%d", rand.Uint64())
		t.Cleanup(func() { _ = demo.DropDatabase(ctx, server, name) })
		return name
	}
	dbURL := func(name string) string {
		u, err := url.Parse(server)
		require.NoError(t, err)
		u.Path = "/" + name
		return u.String()
	}

	t.Run("refuses a database it did not create", func(t *testing.T) {
		name := newName()
		_, err := admin.Exec(ctx, "CREATE DATABASE "+name)
		require.NoError(t, err)
		conn, err := pgx.Connect(ctx, dbURL(name))
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "CREATE TABLE orders (id int); INSERT INTO orders VALUES (1)")
		require.NoError(t, err)
		conn.Close(ctx)

		for _, u := range []string{server, dbURL(name)} {
			r := runCLI(t, u, "demo", "--database-name", name, "--duration", "1s", "--speed", "100",
				"--chart", filepath.Join(t.TempDir(), "shares.svg"), "--console-addr", "")
			require.Equal(t, 2, r.code, r.stderr)
			require.Equal(t, "batchq: --database-name "+name+": database "+name+" exists and batchq demo did not create it;"+
				" the demo drops its database, so name one that does not exist\n", r.stderr)
			require.Empty(t, r.stdout)
		}
		conn, err = pgx.Connect(ctx, dbURL(name))
		require.NoError(t, err)
		defer conn.Close(ctx)
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n))
		require.Equal(t, 1, n, "the database was left as it was")
	})

	t.Run("plays again in the database it created", func(t *testing.T) {
		name := newName()
		for run := range 2 {
			// Long enough for some job to finish on a loaded machine: a
			// demo in which none did has nothing to chart, and fails.
			r := runCLI(t, server, "demo", "--database-name", name, "--duration", "3s", "--speed", "100",
				"--chart", filepath.Join(t.TempDir(), "shares.svg"), "--console-addr", ":0")
			require.Equal(t, 0, r.code, "run %d: %s", run+1, r.stderr)
			require.Regexp(t, `batchq demo: watch it live in the console: http://127\.0\.0\.1:\d+/queues/summaries\?window=1m\n`, r.stdout)
			require.Contains(t, r.stdout, "batchq console --database-url '"+dbURL(name)+"'")
			var comment *string
			require.NoError(t, admin.QueryRow(ctx, `SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1`, name).Scan(&comment))
			require.NotNil(t, comment, "run %d left the database unmarked", run+1)
			require.Equal(t, demo.Marker, *comment)
		}
	})
}
