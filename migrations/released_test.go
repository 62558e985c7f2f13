package migrations_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

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
