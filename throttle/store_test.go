package throttle_test

import (
	"context"
	"encoding/json"
	"reflect"
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
	// Every time State holds, found as Shift's test finds them, so a field
	// added later goes through the "database" too.
	times := map[string]*time.Time{}
	timeFields(reflect.ValueOf(&st), "State", times)
	for _, t := range times {
		*t = t.Truncate(time.Microsecond).In(elsewhere)
	}
	row, err := json.Marshal(st)
	if err != nil {
		return err
	}
	s.rows[key] = row
	return nil
}
