package main

import (
	"fmt"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/internal/pgtest"
	"github.com/batchq/batchq/migrations"
)

func TestMigrateUpStatusDown(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)

	r := runCLI(t, url, "migrate", "up")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "applied 00001_schema.sql")
	require.Contains(t, r.stdout, "applied 00002_queue.sql")

	r = runCLI(t, url, "migrate", "status")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^1\s+applied\s+\S+ \S+\s+00001_schema.sql$`, r.stdout)
	require.Regexp(t, `(?m)^2\s+applied\s+\S+ \S+\s+00002_queue.sql$`, r.stdout)
	r = runCLI(t, url, "migrate", "status", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `"version": 1,\s+"state": "applied",\s+"applied_at": "\d{4}-\d\d-\d\dT[^"]+Z",\s+"file": "00001_schema.sql"`, r.stdout)

	// Down reverts the latest migration, whichever that is now.
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	latest := len(names)
	r = runCLI(t, url, "migrate", "down", "--yes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "reverted "+names[latest-1])
	require.Contains(t, r.stdout, fmt.Sprintf("schema version %d", latest-1))

	r = runCLI(t, url, "migrate", "down", "--to", "1", "--yes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "reverted 00002_queue.sql")
	require.Contains(t, r.stdout, "schema version 1")

	r = runCLI(t, url, "migrate", "status")
	require.Regexp(t, `(?m)^2\s+pending\s+-\s+00002_queue.sql$`, r.stdout)
	r = runCLI(t, url, "--format", "csv", "migrate", "status")
	require.Contains(t, r.stdout, "version,state,applied_at,file\n1,applied,")
	require.Contains(t, r.stdout, "\n2,pending,,00002_queue.sql\n")

	r = runCLI(t, url, "migrate", "down", "--to", "0", "--yes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "schema version 0")

	r = runCLI(t, url, "migrate", "up", "--to", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "schema version 1")
}

func TestMigrateGet(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "migrate", "get", "--version", "1", "--up")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "CREATE SCHEMA IF NOT EXISTS batchq;")
	require.NotContains(t, r.stdout, "DROP SCHEMA")

	r = runCLI(t, "", "migrate", "get", "--version", "1", "--down")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "DROP SCHEMA IF EXISTS batchq CASCADE;")
	require.NotContains(t, r.stdout, "CREATE SCHEMA")

	r = runCLI(t, "", "migrate", "get", "--version", "1")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "exactly one of --up or --down")

	r = runCLI(t, "", "migrate", "get", "--up")
	require.Equal(t, 2, r.code)
	require.Equal(t, "batchq: migrate get: --version is required (see batchq migrate get --help)\n", r.stderr)
	require.Empty(t, r.stdout)

	r = runCLI(t, "", "migrate", "get", "--version", "999", "--up")
	require.Equal(t, 2, r.code, "a wrong flag value")
	require.Contains(t, r.stderr, "--version 999: no such migration")
}

func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"up", "down"} {
		// No server answers here: a usage error must come first.
		r := runCLI(t, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", "migrate", cmd, "--to", "-1")
		require.Equal(t, 2, r.code, "%s: %s", cmd, r.stderr)
		require.Equal(t, "batchq: --to -1: must be a version, 0 or more\n", r.stderr)
		require.Empty(t, r.stdout)
	}

	r := runCLI(t, "", "migrate", "get", "--version", "x", "--up")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "batchq: ")
	require.Contains(t, r.stderr, `"x"`)
}

// Each --to says what its command does without it: up applies every
// pending migration, down reverts only the latest.
func TestMigrateToHelp(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "migrate", "down", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "revert down to this version, which stays applied (0: revert every migration) (default: revert only the latest migration)")
	require.NotContains(t, r.stdout, "all the way")

	r = runCLI(t, "", "migrate", "up", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "apply up to and including this version (default: every pending migration)")
}
