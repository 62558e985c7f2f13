package console_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/console"
)

// TunePool turns parallel workers off unless the pool's own configuration
// says otherwise.
func TestTunePoolKeepsWhatTheURLSets(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"postgres://u@127.0.0.1/db":                                                  "0",
		"postgres://u@127.0.0.1/db?max_parallel_workers_per_gather=4":                "4",
		"postgres://u@127.0.0.1/db?options=-c%20max_parallel_workers_per_gather%3D2": "",
	} {
		cfg, err := pgxpool.ParseConfig(url)
		require.NoError(t, err)
		console.TunePool(cfg)
		require.Equal(t, want, cfg.ConnConfig.RuntimeParams["max_parallel_workers_per_gather"], url)
	}
}
