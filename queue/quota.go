package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/batchq/batchq/internal/dbsqlc"
	"github.com/batchq/batchq/throttle"
)

// QuotaStore is the Postgres throttle.Store: one row of batchq.quota per
// quota key, so every worker of a fleet paces from one shared state. A
// decision reads the row and saves it only if no other process saved it
// meanwhile (a version check), deciding again on what that process saved if
// one did: two round trips, and no lock held between them. The row keeps its
// times on the database's clock, and the store moves them to and from this
// process's clock, so workers whose clocks disagree still pause and resume
// together (to within half a round trip to the database). It is safe for
// concurrent use.
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

// Load implements throttle.Loader: the key's state, read without a lock.
func (s *QuotaStore) Load(ctx context.Context, key string) (throttle.State, error) {
	st, _, _, err := s.load(ctx, key)
	return st, err
}

func (s *QuotaStore) load(ctx context.Context, key string) (st throttle.State, offset time.Duration, version int64, err error) {
	offset, err = s.c.dbClockOffset(ctx)
	if err != nil {
		return st, 0, 0, fmt.Errorf("batchq: quota %q: %w", key, err)
	}
	row, err := s.c.q.GetQuota(ctx, s.c.pool, key)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, offset, -1, nil
	}
	if err != nil {
		return st, 0, 0, fmt.Errorf("batchq: quota %q: %w", key, err)
	}
	if err := json.Unmarshal(row.State, &st); err != nil {
		return st, 0, 0, fmt.Errorf("batchq: quota %q: stored state: %w", key, err)
	}
	st.Shift(-offset)
	return st, offset, row.Version, nil
}

// Update implements throttle.Store. It saves only when fn changed the state,
// and runs fn again when another process saved first.
func (s *QuotaStore) Update(ctx context.Context, key string, fn func(*throttle.State) error) error {
	for attempt := 0; ; attempt++ {
		st, offset, version, err := s.load(ctx, key)
		if err != nil {
			return err
		}
		// Compared as this encoder writes it: the stored jsonb comes back
		// with its keys reordered and spaced, so never byte-equal.
		before, err := json.Marshal(&st)
		if err != nil {
			return fmt.Errorf("batchq: quota %q: %w", key, err)
		}
		if err := fn(&st); err != nil {
			return err
		}
		next, err := json.Marshal(&st)
		if err != nil {
			return fmt.Errorf("batchq: quota %q: %w", key, err)
		}
		if bytes.Equal(next, before) {
			return nil // no row and nothing to save, or nothing changed
		}
		if offset != 0 {
			st.Shift(offset) // to the database's clock
			if next, err = json.Marshal(&st); err != nil {
				return fmt.Errorf("batchq: quota %q: %w", key, err)
			}
		}
		var saved int64
		p := quotaRow(key, next, &st)
		if version < 0 {
			saved, err = s.c.q.InsertQuota(ctx, s.c.pool, dbsqlc.InsertQuotaParams{
				Key: key, State: next, RequestsLimit: p.RequestsLimit, RequestsRemaining: p.RequestsRemaining,
				RequestsResetAt: p.RequestsResetAt, TokensLimit: p.TokensLimit, TokensRemaining: p.TokensRemaining,
				TokensResetAt: p.TokensResetAt, PausedUntil: p.PausedUntil, ObservedAt: p.ObservedAt,
			})
		} else {
			p.Version = version
			saved, err = s.c.q.SaveQuota(ctx, s.c.pool, p)
		}
		if err != nil {
			return fmt.Errorf("batchq: quota %q: %w", key, err)
		}
		if saved == 1 {
			return nil
		}
		// Someone saved first. Past a few tries, step aside briefly so a busy
		// key does not spin.
		if attempt >= 3 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt-3, 4)))):
			}
		}
	}
}

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
