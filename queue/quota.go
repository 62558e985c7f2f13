package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batchq/batchq/internal/dbsqlc"
	"github.com/batchq/batchq/throttle"
)

// QuotaStore is the Postgres throttle.Store: one row of batchq.quota per
// quota key, locked with SELECT … FOR UPDATE for each decision, so every
// worker of a fleet paces from one shared state. It is safe for concurrent
// use.
type QuotaStore struct {
	c *Client
}

// QuotaStore returns the client's Postgres throttle store.
func (c *Client) QuotaStore() *QuotaStore { return &QuotaStore{c: c} }

// Throttle returns a throttle whose state is shared, through this client's
// database, with every process that uses the same quota key. cfg.Store and
// cfg.Key are set from the arguments.
func (c *Client) Throttle(key string, cfg throttle.Config) (*throttle.Throttle, error) {
	if err := checkName("quota key", key); err != nil {
		return nil, fmt.Errorf("batchq: quota key: %s", err.Rule)
	}
	cfg.Store, cfg.Key = c.QuotaStore(), key
	return throttle.New(cfg)
}

// Update implements throttle.Store. It saves only when fn changed the state.
func (s *QuotaStore) Update(ctx context.Context, key string, fn func(*throttle.State) error) error {
	if err := s.c.q.EnsureQuota(ctx, s.c.pool, key); err != nil {
		return fmt.Errorf("batchq: quota %q: %w", key, err)
	}
	return pgx.BeginFunc(ctx, s.c.pool, func(tx pgx.Tx) error {
		raw, err := s.c.q.LockQuota(ctx, tx, key)
		if err != nil {
			return fmt.Errorf("batchq: quota %q: %w", key, err)
		}
		var st throttle.State
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("batchq: quota %q: stored state: %w", key, err)
		}
		if err := fn(&st); err != nil {
			return err
		}
		next, err := json.Marshal(&st)
		if err != nil {
			return fmt.Errorf("batchq: quota %q: %w", key, err)
		}
		if bytes.Equal(next, raw) || isEmptyState(raw) && bytes.Equal(next, emptyState) {
			return nil
		}
		return s.c.q.SaveQuota(ctx, tx, quotaRow(key, next, &st))
	})
}

var emptyState, _ = json.Marshal(&throttle.State{})

func isEmptyState(raw []byte) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("{}")) }

// quotaRow spells the state out in the columns operators read.
func quotaRow(key string, raw []byte, st *throttle.State) dbsqlc.SaveQuotaParams {
	p := dbsqlc.SaveQuotaParams{Key: key, State: raw}
	unit := func(q *throttle.Quota, limit, remaining **int64, reset **time.Time) {
		if !q.Observed {
			return
		}
		if q.HasLimit {
			*limit = &q.Limit
		}
		*remaining = &q.Remaining
		if q.HasReset {
			*reset = &q.ResetAt
		}
		if p.ObservedAt == nil || q.ReceivedAt.After(*p.ObservedAt) {
			at := q.ReceivedAt
			p.ObservedAt = &at
		}
	}
	unit(&st.Requests, &p.RequestsLimit, &p.RequestsRemaining, &p.RequestsResetAt)
	unit(&st.Tokens, &p.TokensLimit, &p.TokensRemaining, &p.TokensResetAt)
	if !st.PausedUntil.IsZero() {
		p.PausedUntil = &st.PausedUntil
	}
	return p
}
