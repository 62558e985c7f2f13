package throttle_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/batchq/batchq/throttle"
	"github.com/batchq/batchq/throttle/throttletest"
)

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	throttletest.RunStoreSuite(t, func(t *testing.T) throttle.Store { return &throttle.MemoryStore{} })
}

func TestRoundTripStore(t *testing.T) {
	t.Parallel()
	// One store for all subtests, as a shared database would be.
	s := &roundTripStore{rows: map[string][]byte{}}
	throttletest.RunStoreSuite(t, func(t *testing.T) throttle.Store { return s })
}

// roundTripStore keeps each State as JSON with its times cut to microseconds
// and moved to another zone, as a Postgres row with timestamptz columns
// would: it shows the throttle depends on nothing a database drops.
type roundTripStore struct {
	mu   sync.Mutex
	rows map[string][]byte
}

var elsewhere = time.FixedZone("UTC-7", -7*60*60)

func (s *roundTripStore) Update(ctx context.Context, key string, fn func(*throttle.State) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st throttle.State
	if row, ok := s.rows[key]; ok {
		if err := json.Unmarshal(row, &st); err != nil {
			return err
		}
	}
	if err := fn(&st); err != nil {
		return err
	}
	db := func(t *time.Time) { *t = t.Truncate(time.Microsecond).In(elsewhere) }
	db(&st.PausedUntil)
	db(&st.BackoffAt)
	db(&st.ProbeAt)
	for _, q := range []*throttle.Quota{&st.Requests, &st.Tokens} {
		db(&q.SentAt)
		db(&q.ReceivedAt)
		db(&q.ResetFrom)
		db(&q.ResetAt)
	}
	for i := range st.Admitted {
		db(&st.Admitted[i].At)
	}
	row, err := json.Marshal(st)
	if err != nil {
		return err
	}
	s.rows[key] = row
	return nil
}
