package migrations_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/db/functions"
	"github.com/batchq/batchq/migrations"
)

// released reads RELEASED: each shipped migration's file name and checksum.
func released(t *testing.T) (sums map[string]string, last string) {
	t.Helper()
	f, err := os.Open("RELEASED")
	require.NoError(t, err)
	defer f.Close()
	sums = map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		require.Len(t, fields, 3, "RELEASED: %q: want release, sha256, file", line)
		sums[fields[2]] = fields[1]
		last = max(last, fields[2])
	}
	require.NoError(t, sc.Err())
	return sums, last
}

// A migration that shipped is history: a database migrated by that release
// keeps what it applied, so editing it would make fresh installs and
// upgraded ones differ.
func TestReleasedMigrationsAreUnchanged(t *testing.T) {
	t.Parallel()
	sums, last := released(t)
	require.NotEmpty(t, sums)
	for name, want := range sums {
		b, err := fs.ReadFile(migrations.FS, name)
		require.NoError(t, err, "released migration %s is missing", name)
		got := sha256.Sum256(b)
		require.Equal(t, want, hex.EncodeToString(got[:]),
			"released migration %s was edited: write a new migration instead, and restore it with git checkout", name)
	}
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	for _, name := range names {
		if _, ok := sums[name]; !ok {
			require.Greater(t, name, last, "new migration %s is numbered before the last released one, %s", name, last)
		}
	}
}

// Each function's text lives in exactly one file: db/functions holds the
// current bodies, one definition each, and a migration after the last
// release defines none in its Up section (its Down may carry a released
// version of one, to go back to that release).
func TestFunctionBodiesLiveInOneFile(t *testing.T) {
	t.Parallel()
	create := regexp.MustCompile(`(?im)^CREATE (?:OR REPLACE )?FUNCTION\s+([a-z_.]+)\s*\(`)
	defined := map[string]string{}
	for _, name := range functions.Files {
		b, err := fs.ReadFile(functions.FS, name)
		require.NoError(t, err)
		for _, m := range create.FindAllStringSubmatch(string(b), -1) {
			require.NotContains(t, defined, m[1], "%s is defined in %s and in %s", m[1], defined[m[1]], name)
			defined[m[1]] = name
		}
	}
	require.Contains(t, defined, "batchq.claim")
	sums, _ := released(t)
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	for _, name := range names {
		if _, ok := sums[name]; ok {
			continue
		}
		b, err := fs.ReadFile(migrations.FS, name)
		require.NoError(t, err)
		up, _, _ := strings.Cut(string(b), "-- +goose Down")
		require.Empty(t, create.FindAllString(up, -1), "%s defines a function: its text belongs in db/functions", name)
	}
	listed, err := fs.Glob(functions.FS, "*.sql")
	require.NoError(t, err)
	require.ElementsMatch(t, listed, functions.Files, "db/functions/functions.go lists every file, once")
}
