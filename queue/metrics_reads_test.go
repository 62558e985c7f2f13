package queue_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

func TestMetricsReads(t *testing.T) {
	t.Parallel()

	setupBacklog := func(t *testing.T) *testBundle {
		t.Helper()
		b := setup(t, queue.QueueConfig{})
		b.enqueueN(t, "a", 3, 10) // 30 tokens
		b.enqueue(t, "b", 50)     // 50 tokens
		b.enqueueN(t, "c", 2, 5)  // 10 tokens
		require.NoError(t, b.client.CreateQueue(b.ctx, queue.QueueConfig{Name: "empty"}))
		_, err := b.client.PauseQueue(b.ctx, "empty")
		require.NoError(t, err)
		return b
	}

	t.Run("LeadingTenants", func(t *testing.T) {
		t.Parallel()
		b := setupBacklog(t)
		rows, err := b.client.LeadingTenants(b.ctx, 2, nil)
		require.NoError(t, err)
		require.Equal(t, []queue.LeadingTenantRow{
			{Queue: "q", Tenant: "a", Tenants: 3},
			{Queue: "q", Tenant: "b", Tenants: 3},
		}, rows, "the two with the most queued tokens, by name; a queue with no jobs has none")
		rows, err = b.client.LeadingTenants(b.ctx, 5, []string{"empty"})
		require.NoError(t, err)
		require.Empty(t, rows)
		_, err = b.client.LeadingTenants(b.ctx, 0, nil)
		require.ErrorContains(t, err, "n must be > 0")
	})

	t.Run("BacklogTotals", func(t *testing.T) {
		t.Parallel()
		b := setupBacklog(t)
		rows, err := b.client.BacklogTotals(b.ctx, nil, map[string][]string{"q": {"a", "nobody"}})
		require.NoError(t, err)
		require.Len(t, rows, 3)
		for i := range rows {
			require.GreaterOrEqual(t, rows[i].OldestQueuedAge, time.Duration(0))
			rows[i].OldestQueuedAge = 0
		}
		require.Equal(t, []queue.BacklogTotalRow{
			{Queue: "empty", Tenant: "", Paused: true},
			{Queue: "q", Tenant: "", QueuedJobs: 3, QueuedTokens: 60},
			{Queue: "q", Tenant: "a", QueuedJobs: 3, QueuedTokens: 30},
		}, rows, "a named tenant, the rest summed, and a row of zeros for a queue with no jobs")

		rows, err = b.client.BacklogTotals(b.ctx, []string{"q"}, nil)
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, int64(6), rows[0].QueuedJobs)
		require.Equal(t, int64(90), rows[0].QueuedTokens)
	})

	t.Run("QuotaLevels", func(t *testing.T) {
		t.Parallel()
		b := setup(t, queue.QueueConfig{})
		rows, err := b.client.QuotaLevels(b.ctx)
		require.NoError(t, err)
		require.Empty(t, rows)

		th, err := b.client.Throttle("openai/gpt", throttle.Config{})
		require.NoError(t, err)
		now := time.Now()
		require.NoError(t, th.ObserveResponse(b.ctx, now, now, &http.Response{StatusCode: http.StatusOK, Header: http.Header{
			"X-Ratelimit-Limit-Tokens":     {"1000"},
			"X-Ratelimit-Remaining-Tokens": {"900"},
			"X-Ratelimit-Reset-Tokens":     {"1h"},
		}}))
		rows, err = b.client.QuotaLevels(b.ctx)
		require.NoError(t, err)
		require.Len(t, rows, 1)
		r := rows[0]
		require.Equal(t, "openai/gpt", r.Key)
		require.Nil(t, r.RequestsLimit, "never reported")
		require.Nil(t, r.RequestsRemaining)
		require.Equal(t, int64(1000), *r.TokensLimit)
		require.Equal(t, int64(900), *r.TokensRemaining)
		require.Zero(t, r.PauseLeft)

		now = time.Now()
		require.NoError(t, th.TooManyRequests(b.ctx, now, now, time.Hour))
		rows, err = b.client.QuotaLevels(b.ctx)
		require.NoError(t, err)
		require.InDelta(t, time.Hour, rows[0].PauseLeft, float64(time.Minute))
	})
}
