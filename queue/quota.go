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
// cfg.Key are set from the arguments. The shared row keeps its times on the
// database's clock, converted from and to time.Now's: leave cfg.Now unset
// outside tests. A key that breaks its rule (1-256 bytes of UTF-8, no
// control characters) is a *SettingError whose Field is "quota_key".
func (c *Client) Throttle(key string, cfg throttle.Config) (*throttle.Throttle, error) {
	if err := checkName("quota key", key); err != nil {
		return nil, &SettingError{Field: "quota_key", Rule: err.Rule}
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
		// Only batchq.save_quota writes the row, and it checks the state;
		// one that does not read was written around it. Pacing from nothing
		// is what a new key does, so start afresh rather than stop the
		// fleet.
		s.c.log.Warn("batchq: a quota key's shared state cannot be read; resetting it", "key", key, "err", err)
		return s.reset(ctx, key, offset, row.Version)
	}
	st.Shift(-offset)
	return st, offset, row.Version, nil
}

// reset saves the zero state over an unreadable one read at version, unless
// another process saved first, and returns what the key holds then.
func (s *QuotaStore) reset(ctx context.Context, key string, offset time.Duration, version int64) (throttle.State, time.Duration, int64, error) {
	zero, err := json.Marshal(&throttle.State{})
	if err != nil {
		return throttle.State{}, 0, 0, err
	}
	saved, err := s.c.q.SaveQuota(ctx, s.c.pool, dbsqlc.SaveQuotaParams{Key: key, Version: &version, State: zero})
	if err != nil {
		return throttle.State{}, 0, 0, fmt.Errorf("batchq: quota %q: reset: %w", key, err)
	}
	if !saved {
		return s.load(ctx, key)
	}
	return throttle.State{}, offset, version + 1, nil
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
		p := dbsqlc.SaveQuotaParams{Key: key, State: next}
		if version >= 0 {
			p.Version = &version
		}
		saved, err := s.c.q.SaveQuota(ctx, s.c.pool, p)
		if err != nil {
			return fmt.Errorf("batchq: quota %q: %w", key, err)
		}
		if saved {
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
