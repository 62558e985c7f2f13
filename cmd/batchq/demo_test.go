package main

import (
	"testing"

	"github.com/stretchr/testify/require"
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
	for _, flag := range []string{"--duration", "--speed", "--chart", "--database-name", "--seed", "BATCHQ_DEMO_SPEED"} {
		require.Contains(t, res.stdout, flag)
	}
}
