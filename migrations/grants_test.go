package migrations_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/migrations"
)

// TestGrantsTemplateKeepsTheOperatorOptionalForPsql checks the template's
// shape that both ways of running it rely on: psql without -v operator_role
// skips every line that names the operator role, and the only psql
// meta-commands are the \if and \endif that Grants removes.
func TestGrantsTemplateKeepsTheOperatorOptionalForPsql(t *testing.T) {
	t.Parallel()
	inIf, blocks := false, 0
	for i, line := range strings.Split(migrations.GrantsTemplate, "\n") {
		switch {
		case line == `\if :{?operator_role}`:
			require.False(t, inIf, "line %d: \\if inside \\if", i+1)
			inIf = true
			blocks++
		case line == `\endif`:
			require.True(t, inIf, "line %d: \\endif without \\if", i+1)
			inIf = false
		case strings.HasPrefix(strings.TrimSpace(line), `\`):
			t.Errorf("line %d: a psql meta-command Grants does not remove: %s", i+1, line)
		case strings.Contains(line, `:'operator_role'`) || strings.Contains(line, `:"operator_role"`):
			require.True(t, inIf, "line %d names the operator role outside \\if :{?operator_role}: %s", i+1, line)
		}
	}
	require.False(t, inIf, "an \\if is not closed")
	require.Equal(t, 2, blocks, "the operator role is set, then granted")
}

func TestGrantsIncludesTheOperatorRole(t *testing.T) {
	t.Parallel()
	sql, err := migrations.Grants("app", "worker", `o"p's`)
	require.NoError(t, err)
	for _, psqlOnly := range []string{`:'`, `:"`, `:{`, `\if`, `\endif`} {
		require.NotContains(t, sql, psqlOnly)
	}
	require.Contains(t, sql, `set_config('batchq.operator_role', 'o"p''s', true);`)
	require.Contains(t, sql, `GRANT USAGE ON SCHEMA batchq TO "o""p's";`)
	require.Contains(t, sql, `batchq.cancel(bigint, text)
TO "o""p's";`)
	require.Contains(t, sql, `batchq.queue_tenants, batchq.quota, batchq.quota_pauses, batchq.jobs, batchq.outcomes, batchq.schedules
TO "o""p's";`)
}

func TestGrantsRefusesRolesThatDoNotDiffer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		app, worker, operator, msg string
	}{
		{"x", "x", "o", `batchq: grants: the app role and the worker role must differ (both "x")`},
		{"x", "w", "x", `batchq: grants: the app role and the operator role must differ (both "x")`},
		{"a", "x", "x", `batchq: grants: the worker role and the operator role must differ (both "x")`},
		{"a", "w", "", "batchq: grants: operator role: must not be empty"},
		{"a", "w", "pg_read_all_data", "batchq: grants: operator role: names starting with pg_ are reserved"},
	} {
		_, err := migrations.Grants(tc.app, tc.worker, tc.operator)
		require.ErrorContains(t, err, tc.msg)
	}
}
