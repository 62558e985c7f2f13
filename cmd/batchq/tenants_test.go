package main

import (
	"strings"
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
	require.Equal(t, "NAME   WEIGHT  MAX QUEUED  QUEUE\nbig    3       500         -\nsmall  0.5     -           -\n", r.stdout)

	r = runCLI(t, db.url, "tenants", "list", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `[{"name":"big","weight":3,"max_queued":500,"queue":null},{"name":"small","weight":0.5,"max_queued":null,"queue":null}]`, r.stdout)
}

// A weight prints whole, the same in every format and in the sentence:
// tables round other numbers to three decimals, and 0.0015 is not 0.002.
func TestTenantsWeightsPrintWhole(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")

	r := runCLI(t, db.url, "tenants", "set", "tiny", "--weight", "0.0015")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "set tenant tiny: weight 0.0015, each queue's bound\n", r.stdout)
	r = runCLI(t, db.url, "tenants", "set", "huge", "--weight", "1000000")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "set tenant huge: weight 1000000, each queue's bound\n", r.stdout)
	r = runCLI(t, db.url, "tenants", "set", "odd", "--queue", "imports", "--weight", "1.2345")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "set tenant odd in queue imports: weight 1.2345, its bound for every queue\n", r.stdout)

	r = runCLI(t, db.url, "tenants", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "NAME  WEIGHT   MAX QUEUED  QUEUE\nhuge  1000000  -           -\ntiny  0.0015   -           -\nodd   1.2345   -           imports\n", r.stdout)
	r = runCLI(t, db.url, "tenants", "list", "--format", "csv")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "name,weight,max_queued,queue\nhuge,1000000,,\ntiny,0.0015,,\nodd,1.2345,,imports\n", r.stdout)
	r = runCLI(t, db.url, "tenants", "list", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `[{"name":"huge","weight":1000000,"max_queued":null,"queue":null},`+
		`{"name":"tiny","weight":0.0015,"max_queued":null,"queue":null},`+
		`{"name":"odd","weight":1.2345,"max_queued":null,"queue":"imports"}]`, r.stdout)

	// The usage report shows the weight as tenants list does.
	r = runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "tiny", "--cost", "5")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "jobs", "cancel", "--queue", "imports", "--yes")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "report", "tenants")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `(?m)^imports\s+tiny\s+1\s.*\s0\.0015\s+1\s`, r.stdout)
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
		{"NaN weight", []string{"set", "a", "--weight", "NaN"}, `batchq: --weight "NaN": not a decimal number`},
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
	require.Contains(t, r.stdout, "create or change a tenant's settings, for every queue or with --queue for one: give --weight, --max-queued or both;")
	r = runCLI(t, "", "tenants", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "give --weight, --max-queued or both")
	require.NotContains(t, r.stdout, "those not given stay as they are")
}

// A tenant's weight and bound for one queue apply there only, over its
// settings for every queue, and unset brings those back.
func TestTenantsSettingsForOneQueue(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	for _, q := range []string{"imports", "chat"} {
		r := runCLI(t, db.url, "queues", "create", q)
		require.Equal(t, 0, r.code, r.stderr)
	}
	r := runCLI(t, db.url, "tenants", "set", "acme", "--weight", "2", "--max-queued", "100")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "tenants", "set", "acme", "--queue", "imports", "--weight", "0.5")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "set tenant acme in queue imports: weight 0.5, its bound for every queue\n", r.stdout)
	r = runCLI(t, db.url, "tenants", "set", "acme", "--queue", "imports", "--max-queued", "3", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"name":"acme","weight":0.5,"max_queued":3,"queue":"imports"}`, r.stdout)

	r = runCLI(t, db.url, "tenants", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "NAME  WEIGHT  MAX QUEUED  QUEUE\nacme  2       100         -\nacme  0.5     3           imports\n", r.stdout)

	// The bound of one queue refuses there, with its number, and not in
	// the other queue.
	for i := 0; i < 3; i++ {
		r = runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "acme", "--cost", "1")
		require.Equal(t, 0, r.code, r.stderr)
	}
	r = runCLI(t, db.url, "enqueue", "--queue", "imports", "--tenant", "acme", "--cost", "1")
	require.NotEqual(t, 0, r.code)
	require.Contains(t, r.stderr, "queue_full")
	require.Contains(t, r.stderr, "(bound 3)")
	r = runCLI(t, db.url, "enqueue", "--queue", "chat", "--tenant", "acme", "--cost", "1")
	require.Equal(t, 0, r.code, r.stderr)
	// The weight for one queue is the one its fair order uses.
	require.Equal(t, int64(500), db.count(t, `SELECT share FROM batchq.tenant_ring WHERE queue = 'imports' AND tenant = 'acme'`))
	require.Equal(t, int64(2000), db.count(t, `SELECT share FROM batchq.tenant_ring WHERE queue = 'chat' AND tenant = 'acme'`))

	r = runCLI(t, db.url, "tenants", "unset", "acme", "--queue", "imports")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "unset tenant acme in queue imports: its settings for every queue apply there\n", r.stdout)
	require.Equal(t, int64(2000), db.count(t, `SELECT share FROM batchq.tenant_ring WHERE queue = 'imports' AND tenant = 'acme'`))
	r = runCLI(t, db.url, "tenants", "unset", "acme", "--queue", "imports")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "tenant acme had no settings of its own in queue imports\n", r.stdout)

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"set", "acme", "--queue", "nope", "--weight", "2"}, `batchq: unknown queue: "nope"`},
		{[]string{"set", "acme", "--queue", "imports", "--weight", "2e6"}, "batchq: --weight: must be in 0.001..1000000 (got 2000000)"},
		{[]string{"set", "acme", "--queue", "imports", "--max-queued", "-1"}, "--max-queued: must be in 0..2147483647"},
		{[]string{"unset", "acme"}, "--queue is required"},
		// Nothing to unset in a queue that does not exist, or for a tenant
		// no tenant could be, is a mistake, not "no settings of its own".
		{[]string{"unset", "acme", "--queue", "nope"}, `batchq: unknown queue: "nope"`},
		{[]string{"unset", "acme", "--queue", "Bad Name!"}, `batchq: unknown queue: "Bad Name!" is not a queue name`},
		{[]string{"unset", "acme", "--queue", ""}, `batchq: unknown queue: "" is not a queue name`},
		{[]string{"unset", "", "--queue", "imports"}, "batchq: tenant name: must not be empty"},
		{[]string{"unset", "a\tb", "--queue", "imports"}, "batchq: tenant name: must not contain control characters"},
	} {
		r := runCLI(t, db.url, append([]string{"tenants"}, tc.args...)...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.msg, tc.args)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
	}
}

// --weight 0 and --max-queued 0 mean, with --queue, the tenant's setting for
// every queue: set back to both, the tenant has no settings of its own in
// the queue, and tenants list shows no empty row for it. Without --queue a
// weight of 0 is refused, saying where 0 goes.
func TestTenantsSetBackToZeroForOneQueue(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t, "imports")
	r := runCLI(t, db.url, "tenants", "set", "acme", "--weight", "2")
	require.Equal(t, 0, r.code, r.stderr)
	r = runCLI(t, db.url, "tenants", "set", "acme", "--queue", "imports", "--weight", "3")
	require.Equal(t, 0, r.code, r.stderr)

	r = runCLI(t, db.url, "tenants", "set", "acme", "--queue", "imports", "--weight", "0")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "set tenant acme in queue imports: its settings for every queue apply there; it has none of its own there\n", r.stdout)
	r = runCLI(t, db.url, "tenants", "list")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "NAME  WEIGHT  MAX QUEUED  QUEUE\nacme  2       -           -\n", r.stdout)

	r = runCLI(t, db.url, "tenants", "set", "beta", "--queue", "imports", "--max-queued", "0", "--weight", "0", "--format", "json")
	require.Equal(t, 0, r.code, r.stderr)
	require.JSONEq(t, `{"name":"beta","weight":null,"max_queued":null,"queue":"imports"}`, r.stdout)
	require.Zero(t, db.count(t, `SELECT count(*) FROM batchq.queue_tenants`))

	r = runCLI(t, db.url, "tenants", "set", "acme", "--weight", "0")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: --weight: must be in 0.001..1000000 (got 0); 0 goes with --queue only, "+
		"where it means the tenant's weight for every queue\n", r.stderr)
	require.Empty(t, r.stdout)
}
