package throttle

import (
	"context"
	"slices"
	"sync"
)

// Store keeps the State of each quota key, shared by every Throttle that
// uses it: in one process (MemoryStore) or across a fleet (the queue's
// Postgres store, one row per key read with SELECT … FOR UPDATE).
//
// Update runs fn on the current State of key (the zero State if there is
// none) and, if fn returns nil, saves the State fn leaves, atomically with
// respect to every other Update of the same key. If fn returns an error,
// Update saves nothing and returns that error. Update may run fn more than
// once (to retry a serialization failure, say); fn depends only on the State
// it is given and does not keep it. A store must keep every field, Admitted in order, and times to
// the microsecond; it may return times in another location.
type Store interface {
	Update(ctx context.Context, key string, fn func(*State) error) error
}

// Loader is implemented by stores that can read a key's State without
// locking it, for questions that change nothing (Throttle.Headroom). The
// State returned is the caller's to keep.
type Loader interface {
	Load(ctx context.Context, key string) (State, error)
}

// MemoryStore is a Store in this process's memory. The zero value is an
// empty store, ready to use; it is safe for concurrent use.
type MemoryStore struct {
	mu   sync.Mutex
	keys map[string]*memoryEntry
}

type memoryEntry struct {
	mu    sync.Mutex
	state State
	next  State // fn's copy; its Admitted array is reused, never shared with state's
}

// Update implements Store. fn works on a copy, so an error leaves the state
// as it was. It returns ctx.Err() without calling fn if ctx is done.
func (m *MemoryStore) Update(ctx context.Context, key string, fn func(*State) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e := m.entry(key)
	e.mu.Lock()
	defer e.mu.Unlock()
	spare := e.next.Admitted[:0]
	e.next = e.state
	e.next.Admitted = append(spare, e.state.Admitted...)
	if err := fn(&e.next); err != nil {
		return err
	}
	e.state, e.next = e.next, e.state
	return nil
}

func (m *MemoryStore) entry(key string) *memoryEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.keys[key]
	if !ok {
		if m.keys == nil {
			m.keys = make(map[string]*memoryEntry)
		}
		e = &memoryEntry{}
		m.keys[key] = e
	}
	return e
}

// Load implements Loader: a copy of key's State.
func (m *MemoryStore) Load(ctx context.Context, key string) (State, error) {
	if err := ctx.Err(); err != nil {
		return State{}, err
	}
	e := m.entry(key)
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.state
	s.Admitted = slices.Clone(e.state.Admitted)
	return s, nil
}
