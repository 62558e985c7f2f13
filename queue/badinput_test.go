package queue_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// TestBadSettingsNameFieldAndRule covers what TestInvalidJobsNameFieldAndRule
// does not: tenant and queue settings. Each is refused with a
// *queue.SettingError naming the field and the rule, and nothing is written.
func TestBadSettingsNameFieldAndRule(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	tenants := []struct {
		name   string
		tenant queue.Tenant
		field  string
		rule   string
	}{
		{"empty name", queue.Tenant{Name: "", Weight: 1}, "name", "must not be empty"},
		{"huge name", queue.Tenant{Name: strings.Repeat("é", 129), Weight: 1}, "name", "at most 256 bytes (got 258)"},
		{"non-UTF-8 name", queue.Tenant{Name: "acme\xc3\x28", Weight: 1}, "name", "must be valid UTF-8"},
		{"NUL in name", queue.Tenant{Name: "ac\x00me", Weight: 1}, "name", "control characters"},
		{"NaN weight", queue.Tenant{Name: "t", Weight: math.NaN()}, "weight", "must be in 0.001..1000000 (got NaN)"},
		{"infinite weight", queue.Tenant{Name: "t", Weight: math.Inf(1)}, "weight", "(got +Inf)"},
		{"negative infinite weight", queue.Tenant{Name: "t", Weight: math.Inf(-1)}, "weight", "(got -Inf)"},
		{"negative weight", queue.Tenant{Name: "t", Weight: -2}, "weight", "(got -2)"},
		{"zero weight", queue.Tenant{Name: "t", Weight: 0}, "weight", "must be in 0.001..1000000 (got 0)"},
		{"negative zero weight", queue.Tenant{Name: "t", Weight: math.Copysign(0, -1)}, "weight", "must be in 0.001..1000000"},
		{"weight below the range", queue.Tenant{Name: "t", Weight: 0.000999}, "weight", "(got 0.000999)"},
		{"weight above the range", queue.Tenant{Name: "t", Weight: 1e306}, "weight", "must be in 0.001..1000000 (got 1e306)"},
		{"negative bound", queue.Tenant{Name: "t", Weight: 1, MaxQueued: -1}, "max_queued", "must be in 0..2147483647, 0 meaning the queue's bound (got -1)"},
		{"bound past int32", queue.Tenant{Name: "t", Weight: 1, MaxQueued: math.MaxInt32 + 1}, "max_queued", "must be in 0..2147483647, 0 meaning the queue's bound (got 2147483648)"},
	}
	for _, tc := range tenants {
		t.Run("tenant/"+tc.name, func(t *testing.T) {
			err := b.client.SetTenant(b.ctx, tc.tenant)
			requireSettingError(t, err, tc.field, tc.rule)
		})
	}

	queues := []struct {
		name  string
		qc    queue.QueueConfig
		field string
		rule  string
	}{
		{"SQL in the name", queue.QueueConfig{Name: "q'; DROP TABLE batchq.jobs; --"}, "name", "must be 1-128 characters"},
		{"empty name", queue.QueueConfig{Name: "-"}, "name", "starting with a letter or digit"},
		{"huge name", queue.QueueConfig{Name: strings.Repeat("q", 129)}, "name", "must be 1-128 characters"},
		{"non-UTF-8 name", queue.QueueConfig{Name: "q\xff"}, "name", "must be 1-128 characters"},
		{"negative quantum", queue.QueueConfig{Name: "x", Quantum: -1}, "quantum", "must be in 1..1000000000 (got -1)"},
		{"quantum too large", queue.QueueConfig{Name: "x", Quantum: queue.MaxCost + 1}, "quantum", "must be in 1.."},
		{"negative bound", queue.QueueConfig{Name: "x", MaxPerTenant: -3}, "max_per_tenant", "must be in 1..2147483647 (got -3)"},
		{"bound too large", queue.QueueConfig{Name: "x", MaxPerTenant: 3_000_000_000}, "max_per_tenant", "must be in 1..2147483647 (got 3000000000)"},
		{"negative ttl", queue.QueueConfig{Name: "x", DefaultTTL: -time.Hour}, "default_ttl", "must be > 0"},
		{"short lease", queue.QueueConfig{Name: "x", Lease: time.Millisecond}, "lease", "must be at least 1s (got 1ms)"},
		{"too many attempts", queue.QueueConfig{Name: "x", MaxAttempts: 1001}, "max_attempts", "must be in 1..1000 (got 1001)"},
		{"negative unique_for", queue.QueueConfig{Name: "x", UniqueFor: -time.Second}, "unique_for", "must be >= 0"},
		{"ttl below a microsecond", queue.QueueConfig{Name: "x", DefaultTTL: 999}, "default_ttl", "must be a whole number of microseconds (got 999ns)"},
		{"lease in nanoseconds", queue.QueueConfig{Name: "x", Lease: time.Minute + 1}, "lease", "whole number of microseconds (got 1m0.000000001s)"},
		{"unique_for below a microsecond", queue.QueueConfig{Name: "x", UniqueFor: 500}, "unique_for", "whole number of microseconds (got 500ns)"},
	}
	for _, tc := range queues {
		t.Run("queue/"+tc.name, func(t *testing.T) {
			requireSettingError(t, b.client.CreateQueue(b.ctx, tc.qc), tc.field, tc.rule)
		})
	}
	_, err := b.client.UpdateQueue(b.ctx, b.queue, queue.QueueUpdate{Quantum: new(int64)})
	requireSettingError(t, err, "quantum", "(got 0)")
	short := 500 * time.Nanosecond
	_, err = b.client.UpdateQueue(b.ctx, b.queue, queue.QueueUpdate{UniqueFor: &short})
	requireSettingError(t, err, "unique_for", "(got 500ns)")
	_, err = b.client.UpdateQueue(b.ctx, "missing", queue.QueueUpdate{})
	require.ErrorIs(t, err, queue.ErrUnknownQueue)

	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.tenants`))
	require.Equal(t, int64(1), b.scalar(t, `SELECT count(*) FROM batchq.queues`))
	require.Equal(t, int64(1000), b.scalar(t, `SELECT quantum FROM batchq.queues`))
}

func requireSettingError(t *testing.T, err error, field, rule string) {
	t.Helper()
	var se *queue.SettingError
	require.ErrorAs(t, err, &se)
	require.ErrorIs(t, err, queue.ErrInvalidSettings)
	require.Equal(t, field, se.Field)
	require.Contains(t, err.Error(), rule)
	require.True(t, strings.HasPrefix(err.Error(), "batchq: invalid settings: "+field+": "), err.Error())
}

// TestBadJobsWriteNothing adds to TestInvalidJobsNameFieldAndRule the fields
// and paths it leaves out, and checks that a refused call writes nothing at
// all: no job, no ring row, no ledger entry, whether one job or a batch was
// refused, and whichever queue or line of the batch was at fault.
func TestBadJobsWriteNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{MaxPerTenant: 2})
	require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "other"}))
	valid := queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1}
	cases := []struct {
		name  string
		edit  func(*queue.NewJob)
		field string
		rule  string
	}{
		{"kind too long", func(j *queue.NewJob) { j.Kind = strings.Repeat("k", 257) }, "kind", "at most 256 bytes"},
		{"kind not UTF-8", func(j *queue.NewJob) { j.Kind = "\xed\xa0\x80" }, "kind", "valid UTF-8"},
		{"kind with a newline", func(j *queue.NewJob) { j.Kind = "a\nb" }, "kind", "control characters"},
		{"unique key too long", func(j *queue.NewJob) { j.UniqueKey = strings.Repeat("u", 300) }, "unique_key", "at most 256 bytes"},
		{"unique key not UTF-8", func(j *queue.NewJob) { j.UniqueKey = "\x80" }, "unique_key", "valid UTF-8"},
		{"tenant of DEL", func(j *queue.NewJob) { j.Tenant = "\x7f" }, "tenant", "control characters"},
		{"cost far below zero", func(j *queue.NewJob) { j.Cost = math.MinInt64 }, "cost", "(got -9223372036854775808)"},
		{"cost at the int64 limit", func(j *queue.NewJob) { j.Cost = math.MaxInt64 }, "cost", "must be in 1..1000000000"},
		{"deadline now", func(j *queue.NewJob) { j.Deadline = time.Now() }, "deadline", "must be in the future"},
		{"deadline past year 9999", func(j *queue.NewJob) { j.Deadline = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "deadline", "before year 10000"},
		{"attempts past the limit", func(j *queue.NewJob) { j.MaxAttempts = 1001 }, "max_attempts", "(got 1001)"},
		{"payload of two values", func(j *queue.NewJob) { j.Payload = []byte(`{} {}`) }, "payload", "valid JSON"},
		{"payload NaN", func(j *queue.NewJob) { j.Payload = []byte(`{"x": NaN}`) }, "payload", "valid JSON"},
		{"payload one byte over", func(j *queue.NewJob) {
			j.Payload = []byte(`"` + strings.Repeat("x", queue.DefaultMaxPayloadBytes-1) + `"`)
		}, "payload", "at most 1048576 bytes as jsonb text (got 1048577)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := valid
			tc.edit(&j)
			_, err := b.client.Enqueue(b.ctx, j)
			requireInvalidJob(t, err, 0, tc.field, tc.rule)
			// The same job in the middle of a batch: the error names its
			// place, and the valid jobs around it are not written either.
			_, err = b.client.EnqueueMany(b.ctx, []queue.NewJob{valid, {Queue: "other", Tenant: "u", Cost: 5}, j, valid})
			requireInvalidJob(t, err, 3, tc.field, tc.rule)
		})
	}

	// A batch that names an unknown queue, or overfills a tenant, after
	// valid jobs in other queues and tenants: all or nothing.
	_, err := b.client.EnqueueMany(b.ctx, []queue.NewJob{valid, {Queue: "other", Tenant: "u", Cost: 5}, {Queue: "nowhere", Tenant: "t", Cost: 1}})
	require.ErrorIs(t, err, queue.ErrUnknownQueue)
	require.ErrorContains(t, err, `"nowhere"`)
	_, err = b.client.EnqueueMany(b.ctx, []queue.NewJob{{Queue: "other", Tenant: "u", Cost: 5}, valid, valid, valid})
	var full *queue.QueueFullError
	require.ErrorAs(t, err, &full)
	require.Equal(t, queue.QueueFullError{Queue: b.queue, Tenant: "t", Bound: 2, Queued: 0, Adding: 3}, *full)

	for _, table := range []string{"jobs", "tenant_ring", "ledger_adjustments", "outcomes", "tenants"} {
		require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.`+table), "batchq.%s", table)
	}
}

func requireInvalidJob(t *testing.T, err error, index int, field, rule string) {
	t.Helper()
	var inv *queue.InvalidJobError
	require.ErrorAs(t, err, &inv)
	require.ErrorIs(t, err, queue.ErrInvalidJob)
	require.Equal(t, index, inv.Index)
	require.Equal(t, field, inv.Field)
	require.Contains(t, err.Error(), rule)
	require.True(t, strings.HasPrefix(err.Error(), "batchq: invalid job"), err.Error())
	require.NotContains(t, err.Error(), "\n")
}

// TestHostileTextIsData enqueues names, keys and payloads made of SQL
// metacharacters, quotes, escapes and non-Latin text: each is stored and
// read back exactly as given, and nothing else in the database changes.
func TestHostileTextIsData(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	hostile := []string{
		`'; DROP TABLE batchq.jobs; --`,
		`" OR 1=1 --`,
		`$1 $$ $q$ \x00 \\ %s %_ *`,
		`Robert'); DELETE FROM batchq.outcomes WHERE ('1'='1`,
		"テナント 🚀 שלום",
		strings.Repeat("é", 128), // 256 bytes, the most a name may have
	}
	for i, s := range hostile {
		payload, err := json.Marshal(map[string]string{"text": s})
		require.NoError(t, err)
		res, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: s, Kind: s, Cost: int64(i + 1), Payload: payload, UniqueKey: s})
		require.NoError(t, err, "%q", s)
		require.NoError(t, b.client.SetTenant(b.ctx, queue.Tenant{Name: s, Weight: 1.5}))
		info, err := b.client.JobInfo(b.ctx, res.ID)
		require.NoError(t, err)
		require.Equal(t, s, info.Tenant)
		require.Equal(t, s, info.Kind)
		require.Equal(t, s, info.UniqueKey)
		require.JSONEq(t, string(payload), string(info.Payload))
	}
	require.Equal(t, int64(len(hostile)), b.scalar(t, `SELECT count(*) FROM batchq.jobs`))
	require.Equal(t, int64(len(hostile)), b.scalar(t, `SELECT count(*) FROM batchq.tenants WHERE weight = 1.5`))
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 100})
	require.NoError(t, err)
	require.Len(t, jobs, len(hostile))
	for _, j := range jobs {
		require.NoError(t, b.client.Complete(b.ctx, j, queue.Result{Output: j.Payload}))
	}
	require.Equal(t, int64(len(hostile)), b.scalar(t, `SELECT count(*) FROM batchq.outcomes WHERE tenant = kind AND tenant = unique_key AND result->>'text' = tenant`))
}

// A payload is bounded as the server prints it, numbers written out in full:
// a few kilobytes of "1e131071" print as a gigabyte, and the server cannot
// build that text, so every claim that reached the job would fail, for
// every tenant of its queue. Such a payload is refused, naming the field.
func TestPayloadBoundedAsPrinted(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	huge := "[" + strings.Repeat("1e131071,", 9000) + "1]" // 81 KB of text
	_, err := b.client.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1, Payload: []byte(huge)})
	var inv *queue.InvalidJobError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "payload", inv.Field)
	require.Contains(t, inv.Rule, "bytes as jsonb text")
	require.Zero(t, b.scalar(t, `SELECT count(*) FROM batchq.jobs`))

	// Within the bound as printed: accepted, and claimed.
	small, err := queue.NewClient(b.pool, queue.Config{MaxPayloadBytes: 130})
	require.NoError(t, err)
	_, err = small.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1, Payload: []byte(`{"n":1e100,"f":-0.25,"z":0}`)})
	require.NoError(t, err, "128 bytes as printed: 1e100 is 101 digits")
	_, err = small.Enqueue(b.ctx, queue.NewJob{Queue: b.queue, Tenant: "t", Cost: 1, Payload: []byte(`{"n":1e130}`)})
	require.ErrorAs(t, err, &inv, "138 bytes as printed, 11 as written")
	require.Equal(t, "must be at most 130 bytes as jsonb text (got 138)", inv.Rule)
	jobs, err := b.client.Claim(b.ctx, b.queue, &queue.ClaimOpts{Limit: 10})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
}

// ValidQueueName accepts exactly the names CreateQueue does.
func TestValidQueueNameIsCreateQueuesRule(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.QueueConfig{})
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"q2", true}, {"a.b:c-d_e", true}, {"9lives", true}, {strings.Repeat("x", 128), true},
		{"", false}, {"-a", false}, {"_a", false}, {"a b", false}, {"é", false}, {"a/b", false},
		{strings.Repeat("x", 129), false}, {"a\n", false},
	} {
		require.Equal(t, c.ok, queue.ValidQueueName(c.name), "ValidQueueName(%q)", c.name)
		err := b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: c.name})
		require.Equal(t, c.ok, err == nil, "CreateQueue(%q): %v", c.name, err)
	}
}
