package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTenantsSetAndList(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)

	r := runCLI(t, db.url, "tenants", "set", "big", "--weight", "3")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "set tenant big: weight 3, each queue's bound\n", r.stdout)

	// Setting one thing leaves the other as it was.
	r = runCLI(t, db.url, "tenants", "set", "big", "--max-queued", "500")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "set tenant big: weight 3, at most 500 queued per queue\n", r.stdout)
	r = runCLI(t, db.url, "tenants", "set", "small", "--max-queued", "20")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "weight 1,", "a new tenant weighs 1")
	r = runCLI(t, db.url, "tenants", "set", "small", "--max-queued", "0", "--weight", "0.5")
	require.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, db.url, "tenants", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "NAME   WEIGHT  MAX QUEUED\nbig    3       500\nsmall  0.5     -\n", r.stdout)

	r = runCLI(t, db.url, "tenants", "list", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `[{"name":"big","weight":3,"max_queued":500},{"name":"small","weight":0.5,"max_queued":null}]`, r.stdout)
}

func TestTenantsErrors(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"nothing to set", []string{"set", "a"}, "give --weight, --max-queued or both"},
		{"zero weight", []string{"set", "a", "--weight", "0"}, "batchq: --weight: must be in 0.001..1000000 (got 0)"},
		{"NaN weight", []string{"set", "a", "--weight", "NaN"}, "batchq: --weight: must be in 0.001..1000000 (got NaN)"},
		{"negative bound", []string{"set", "a", "--max-queued", "-2"}, "batchq: --max-queued: must be in 0..2147483647, 0 meaning the queue's bound (got -2)"},
		{"not a number", []string{"set", "a", "--weight", "heavy"}, `"heavy"`},
		{"no name", []string{"set", "--weight", "2"}, "missing NAME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, db.url, append([]string{"tenants"}, tc.args...)...)
			require.Equal(t, 2, r.code, r.stderr)
			require.Contains(t, r.stderr, tc.msg)
		})
	}
	require.Zero(t, db.count(t, `SELECT count(*) FROM batchq.tenants`))
}

// The help says what the command refuses: a set with no setting.
func TestTenantsSetHelpSaysASettingIsNeeded(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "tenants", "set", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "create or change a tenant's settings: give --weight, --max-queued or both;")
	r = runCLI(t, "", "tenants", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "give --weight, --max-queued or both")
	require.NotContains(t, r.stdout, "those not given stay as they are")
}
